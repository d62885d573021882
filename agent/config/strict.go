package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// unknownField returns the dotted path of the first field in doc (a decoded YAML/JSON
// document) that t does not have, so an error names "paths.sysfss", not just "sysfss".
func unknownField(doc any, t reflect.Type, prefix string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch v := doc.(type) {
	case map[string]any:
		if t.Kind() == reflect.Array && t.Len() == nr1.NumResources {
			return unknownResource(v, t, prefix)
		}
		if t.Kind() != reflect.Struct || t == reflect.TypeOf(Duration{}) {
			return ""
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ft, ok := fields[k]
			if !ok {
				return prefix + k
			}
			if bad := unknownField(v[k], ft, prefix+k+"."); bad != "" {
				return bad
			}
		}
	case []any:
		if t.Kind() != reflect.Slice {
			return ""
		}
		for i, e := range v {
			if bad := unknownField(e, t.Elem(), fmt.Sprintf("%s[%d].", strings.TrimSuffix(prefix, "."), i)); bad != "" {
				return bad
			}
		}
	}
	return ""
}

// unknownResource checks an nr1.PerResource, an object keyed by the resources' short
// names.
func unknownResource(v map[string]any, t reflect.Type, prefix string) string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if r, err := nr1.ParseResource(k); err != nil || r.Short() != k {
			return prefix + k
		}
		if bad := unknownField(v[k], t.Elem(), prefix+k+"."); bad != "" {
			return bad
		}
	}
	return ""
}

func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = f.Type
	}
	return fields
}
