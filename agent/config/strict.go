// SPDX-License-Identifier: Apache-2.0

package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	sigsjson "sigs.k8s.io/json"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// decodeStrict decodes the JSON document j over c, refusing unknown and duplicate fields,
// each named by its full path ("paths.sysfss").
func (c *Config) decodeStrict(j []byte) error {
	shape := reflect.New(strictShape(reflect.TypeOf(c).Elem())).Interface()
	strict, shapeErr := sigsjson.UnmarshalStrict(j, shape)
	var bad *badDuration
	switch {
	case errors.As(shapeErr, &bad):
		return shapeErr //nolint:wrapcheck // loadFile names the file
	case shapeErr == nil && len(strict) > 0:
		return fieldErrors(strict)
	}
	// A value of the wrong type is told in the configuration's own types, not the shape's.
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(j, c); err != nil {
		return err //nolint:wrapcheck // loadFile names the file
	}
	if shapeErr != nil {
		return shapeErr //nolint:wrapcheck // loadFile names the file
	}
	return nil
}

// fieldErrors writes each strict error as "path: unknown field", the form Validate uses.
func fieldErrors(strict []error) error {
	errs := make([]error, 0, len(strict))
	for _, e := range strict {
		var fe sigsjson.FieldError
		if !errors.As(e, &fe) {
			errs = append(errs, e)
			continue
		}
		what := strings.TrimSuffix(fe.Error(), " "+strconv.Quote(fe.FieldPath()))
		errs = append(errs, fmt.Errorf("%s: %s", fe.FieldPath(), what))
	}
	return errors.Join(errs...)
}

var (
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	durationType    = reflect.TypeFor[Duration]()
)

// shapeDuration decodes as Duration does, saying what a duration looks like when the
// value is not one: the library's error is only time.ParseDuration's.
type shapeDuration struct{}

type badDuration struct{ value []byte }

func (e *badDuration) Error() string {
	return fmt.Sprintf("want a duration such as \"5s\", got %s", e.value)
}

func (*shapeDuration) UnmarshalJSON(b []byte) error {
	var d Duration
	if err := d.UnmarshalJSON(b); err != nil {
		return &badDuration{value: b}
	}
	return nil
}

// strictShape is t as the strict decoder is to see it. The decoder cannot see into a type
// that decodes itself, and nr1.PerResource does (an object keyed by resource over an
// array): in the shape it is a struct with a field per resource, so that an unknown
// resource, or an unknown field in one, is named by its path like any other.
func strictShape(t reflect.Type) reflect.Type {
	if t == durationType {
		return reflect.TypeFor[shapeDuration]()
	}
	switch t.Kind() {
	case reflect.Pointer:
		return reflect.PointerTo(strictShape(t.Elem()))
	case reflect.Slice:
		return reflect.SliceOf(strictShape(t.Elem()))
	case reflect.Map:
		return reflect.MapOf(t.Key(), strictShape(t.Elem()))
	case reflect.Array:
		if t.Len() != nr1.NumResources || !reflect.PointerTo(t).Implements(unmarshalerType) {
			return t
		}
		fields := make([]reflect.StructField, 0, nr1.NumResources)
		for _, r := range nr1.All {
			fields = append(fields, reflect.StructField{Name: fieldName(len(fields)), Type: strictShape(t.Elem()), Tag: reflect.StructTag(fmt.Sprintf("json:%q", r.Short()))})
		}
		return reflect.StructOf(fields)
	case reflect.Struct:
		if reflect.PointerTo(t).Implements(unmarshalerType) {
			return t
		}
		fields := make([]reflect.StructField, 0, t.NumField())
		for f := range t.Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name == "" || name == "-" || !f.IsExported() {
				continue
			}
			fields = append(fields, reflect.StructField{Name: fieldName(len(fields)), Type: strictShape(f.Type), Tag: f.Tag})
		}
		return reflect.StructOf(fields)
	default:
		return t
	}
}

func fieldName(i int) string { return "F" + strconv.Itoa(i) }
