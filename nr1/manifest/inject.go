// SPDX-License-Identifier: Apache-2.0

package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Mode is how the node offers the NR1, and so how a CG asks for it.
type Mode string

// The modes, named as the agent's configuration names them.
const (
	DevicePlugin Mode = "devicePlugin"
	DRA          Mode = "dra"
)

// Options say where the CG's resources go.
type Options struct {
	Mode Mode
	// Containers are the containers that get the resources: with the device plugin
	// exactly one (the kubelet books what each container requests, so two would book the
	// CG twice), health-handler by the toolchain's convention; with DRA every container
	// that uses the NR1 shares the pod's one claim.
	Containers []string
}

// DefaultContainer is the container the NR1 toolchain puts a CG's resources on.
const DefaultContainer = "health-handler"

// Inject writes the YAML or JSON stream in to out with a's resources given to the named
// containers of every pod it holds (a Pod, the pod template of a workload, the items of
// a List); other objects pass through. With the device plugin, the four resources go
// into the container's requests and limits, equal; with DRA, a ResourceClaimTemplate
// per pod is written before its object, the pod claims it and the containers use the
// claim (and lose any NR1 requests, which no node in DRA mode could satisfy). Nothing is
// written unless every pod could be given its resources.
func Inject(in io.Reader, out io.Writer, a nr1.Amounts, o Options) error {
	if len(o.Containers) == 0 {
		o.Containers = []string{DefaultContainer}
	}
	switch o.Mode {
	case DevicePlugin:
		if len(o.Containers) != 1 {
			return fmt.Errorf("the device plugin books what each container requests: name one container, not %d", len(o.Containers))
		}
	case DRA:
	default:
		return fmt.Errorf("mode %q: want %q or %q", o.Mode, DevicePlugin, DRA)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(in, 4096)
	var docs [][]byte
	pods := 0
	for i := 1; ; i++ {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("object %d: %w", i, err)
		}
		if obj == nil {
			continue // an empty document
		}
		var extra []map[string]any
		n, err := injectObject(obj, a, o, &extra)
		if err != nil {
			return fmt.Errorf("object %d (%s): %w", i, describe(obj), err)
		}
		pods += n
		for _, e := range append(extra, obj) {
			b, err := yaml.Marshal(e)
			if err != nil {
				return fmt.Errorf("object %d (%s): %w", i, describe(obj), err)
			}
			docs = append(docs, b)
		}
	}
	if pods == 0 {
		return errors.New("no pod or pod template found")
	}
	_, err := out.Write(bytes.Join(docs, []byte("---\n")))
	return err //nolint:wrapcheck // the caller's writer, named by the caller
}

// injectObject gives the resources to obj's pods and returns how many it holds; extra
// gets the objects to write before obj.
func injectObject(obj map[string]any, a nr1.Amounts, o Options, extra *[]map[string]any) (int, error) {
	kind, _ := obj["kind"].(string)
	if kind == "List" || strings.HasSuffix(kind, "List") {
		items, _ := obj["items"].([]any)
		n := 0
		for j, it := range items {
			item, ok := it.(map[string]any)
			if !ok {
				return 0, fmt.Errorf("items[%d] is not an object", j)
			}
			m, err := injectObject(item, a, o, extra)
			if err != nil {
				return 0, fmt.Errorf("items[%d] (%s): %w", j, describe(item), err)
			}
			n += m
		}
		return n, nil
	}
	path, ok := podSpecPaths[kind]
	if !ok {
		return 0, nil
	}
	spec, err := lookup(obj, path)
	if err != nil {
		return 0, err
	}
	switch o.Mode {
	case DevicePlugin:
		err = requestsAndLimits(spec, a, o.Containers[0])
	case DRA:
		var tmpl map[string]any
		tmpl, err = claim(obj, spec, a, o.Containers)
		*extra = append(*extra, tmpl)
	}
	if err != nil {
		return 0, err
	}
	return 1, nil
}

// podSpecPaths locate the pod spec in each kind that holds one.
var podSpecPaths = map[string][]string{
	"Pod":                   {"spec"},
	"Deployment":            {"spec", "template", "spec"},
	"ReplicaSet":            {"spec", "template", "spec"},
	"StatefulSet":           {"spec", "template", "spec"},
	"DaemonSet":             {"spec", "template", "spec"},
	"Job":                   {"spec", "template", "spec"},
	"ReplicationController": {"spec", "template", "spec"},
	"PodTemplate":           {"template", "spec"},
	"CronJob":               {"spec", "jobTemplate", "spec", "template", "spec"},
}

func lookup(obj map[string]any, path []string) (map[string]any, error) {
	cur := obj
	for i, k := range path {
		next, ok := cur[k].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("no %s", strings.Join(path[:i+1], "."))
		}
		cur = next
	}
	return cur, nil
}

// container finds the named container among the spec's containers and init containers
// (a sidecar may be the one holding the NR1).
func container(spec map[string]any, name string) (map[string]any, error) {
	var names []string
	for _, list := range []string{"containers", "initContainers"} {
		cs, _ := spec[list].([]any)
		for _, c := range cs {
			m, ok := c.(map[string]any)
			if !ok {
				continue
			}
			n, _ := m["name"].(string)
			if n == name {
				return m, nil
			}
			names = append(names, n)
		}
	}
	return nil, fmt.Errorf("no container %q (containers: %s)", name, strings.Join(names, ", "))
}

func child(m map[string]any, key string) map[string]any {
	c, ok := m[key].(map[string]any)
	if !ok {
		c = map[string]any{}
		m[key] = c
	}
	return c
}

func requestsAndLimits(spec map[string]any, a nr1.Amounts, name string) error {
	c, err := container(spec, name)
	if err != nil {
		return err
	}
	res := child(c, "resources")
	for _, key := range []string{"requests", "limits"} {
		m := child(res, key)
		for _, r := range nr1.All {
			m[r.Name()] = fmt.Sprint(a[r])
		}
	}
	return nil
}

// claim makes the pod claim a template for a and its containers use the claim, and
// returns the template.
func claim(obj, spec map[string]any, a nr1.Amounts, names []string) (map[string]any, error) {
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if name == "" {
		return nil, errors.New("no metadata.name to name its ResourceClaimTemplate after")
	}
	namespace, _ := meta["namespace"].(string)
	for _, n := range names {
		c, err := container(spec, n)
		if err != nil {
			return nil, err
		}
		res := child(c, "resources")
		for _, key := range []string{"requests", "limits"} {
			m, _ := res[key].(map[string]any)
			for _, r := range nr1.All {
				delete(m, r.Name())
			}
			if m != nil && len(m) == 0 {
				delete(res, key)
			}
		}
		claims, _ := res["claims"].([]any)
		if !slices.ContainsFunc(claims, func(x any) bool { m, _ := x.(map[string]any); return m["name"] == RequestName }) {
			res["claims"] = append(claims, map[string]any{"name": RequestName})
		}
	}
	podClaims, _ := spec["resourceClaims"].([]any)
	podClaims = slices.DeleteFunc(podClaims, func(x any) bool { m, _ := x.(map[string]any); return m["name"] == RequestName })
	spec["resourceClaims"] = append(podClaims, map[string]any{"name": RequestName, "resourceClaimTemplateName": name})

	b, err := yaml.Marshal(ClaimTemplate(namespace, name, a))
	if err != nil {
		return nil, fmt.Errorf("ResourceClaimTemplate %s: %w", name, err)
	}
	var tmpl map[string]any
	if err := yaml.Unmarshal(b, &tmpl); err != nil {
		return nil, fmt.Errorf("ResourceClaimTemplate %s: %w", name, err)
	}
	// What the API server would default or ignore is left out, as a person would.
	delete(child(tmpl, "metadata"), "creationTimestamp")
	if m := child(child(tmpl, "spec"), "metadata"); len(m) == 0 {
		delete(child(tmpl, "spec"), "metadata")
	}
	return tmpl, nil
}

func describe(obj map[string]any) string {
	kind, _ := obj["kind"].(string)
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if kind == "" {
		kind = "object"
	}
	if name == "" {
		return kind
	}
	return kind + " " + name
}
