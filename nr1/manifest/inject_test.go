// SPDX-License-Identifier: Apache-2.0

package manifest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	goldenfile "github.com/neureality-sdk/nr1-agent/internal/golden"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

var resnet50 = nr1.Amounts{3, 0, 2392, 7}

func inject(t *testing.T, file string, o Options) []byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	if err := Inject(f, &out, resnet50, o); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), got)
}

// decodeAll reads the stream back into the API's types, as the API server would.
func decodeAll(t *testing.T, b []byte) (pods []corev1.Pod, templates []resourceapi.ResourceClaimTemplate, kinds []string) {
	t.Helper()
	for _, doc := range strings.Split(string(b), "---\n") {
		var meta struct{ Kind string }
		if err := utilyaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, meta.Kind)
		switch meta.Kind {
		case "Pod":
			var p corev1.Pod
			if err := utilyaml.UnmarshalStrict([]byte(doc), &p); err != nil {
				t.Fatal(err)
			}
			pods = append(pods, p)
		case "ResourceClaimTemplate":
			var tmpl resourceapi.ResourceClaimTemplate
			if err := utilyaml.UnmarshalStrict([]byte(doc), &tmpl); err != nil {
				t.Fatal(err)
			}
			templates = append(templates, tmpl)
		}
	}
	return pods, templates, kinds
}

// With the device plugin the four resources land in health-handler's requests and
// limits, equal, beside what it asked before; the other objects pass through.
func TestInjectDevicePlugin(t *testing.T) {
	out := inject(t, "pod.yaml", Options{Mode: DevicePlugin})
	golden(t, "pod-deviceplugin.golden.yaml", out)
	pods, _, kinds := decodeAll(t, out)
	if strings.Join(kinds, ",") != "Pod,Service" {
		t.Fatalf("kinds %v", kinds)
	}
	hh := pods[0].Spec.Containers[0]
	for _, r := range nr1.All {
		name := corev1.ResourceName(r.Name())
		want := *resource.NewQuantity(int64(resnet50[r]), resource.DecimalSI)
		if q := hh.Resources.Requests[name]; q.Cmp(want) != 0 {
			t.Errorf("request %s = %s, want %s", name, q.String(), want.String())
		}
		if q := hh.Resources.Limits[name]; q.Cmp(want) != 0 {
			t.Errorf("limit %s = %s, want %s", name, q.String(), want.String())
		}
	}
	if q := hh.Resources.Requests[corev1.ResourceCPU]; q.String() != "100m" {
		t.Errorf("the container's own request was lost: cpu %s", q.String())
	}
	if g := pods[0].Spec.Containers[1].Resources; len(g.Requests)+len(g.Limits) != 0 {
		t.Errorf("graph was given %v", g)
	}
}

// With DRA the pod claims a template of the CG's amounts and the named containers use
// the claim; an NR1 request left from a device-plugin spec is removed.
func TestInjectDRA(t *testing.T) {
	var dp bytes.Buffer
	f, err := os.Open("testdata/pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := Inject(f, &dp, resnet50, Options{Mode: DevicePlugin}); err != nil {
		t.Fatal(err)
	}
	// Injecting into what the device plugin's injection wrote must give the same as
	// into the original: moving a CG between modes leaves nothing behind.
	for _, in := range []string{"pod.yaml", ""} {
		var out bytes.Buffer
		src, err := os.ReadFile("testdata/pod.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if in == "" {
			src = dp.Bytes()
		}
		if err := Inject(bytes.NewReader(src), &out, resnet50, Options{Mode: DRA, Containers: []string{"health-handler", "graph"}}); err != nil {
			t.Fatal(err)
		}
		golden(t, "pod-dra.golden.yaml", out.Bytes())
		pods, templates, kinds := decodeAll(t, out.Bytes())
		if strings.Join(kinds, ",") != "ResourceClaimTemplate,Pod,Service" {
			t.Fatalf("kinds %v", kinds)
		}
		p, tmpl := pods[0], templates[0]
		if tmpl.Name != "resnet50" || tmpl.Namespace != "ml" || len(p.Spec.ResourceClaims) != 1 ||
			p.Spec.ResourceClaims[0].ResourceClaimTemplateName == nil || *p.Spec.ResourceClaims[0].ResourceClaimTemplateName != "resnet50" {
			t.Fatalf("template %s/%s, pod claims %+v", tmpl.Namespace, tmpl.Name, p.Spec.ResourceClaims)
		}
		for _, c := range p.Spec.Containers {
			if len(c.Resources.Claims) != 1 || c.Resources.Claims[0].Name != RequestName {
				t.Errorf("%s uses claims %+v", c.Name, c.Resources.Claims)
			}
			for name := range c.Resources.Limits {
				t.Errorf("%s keeps limit %s", c.Name, name)
			}
		}
	}
}

// A Deployment's pod template is injected, here on a sidecar (an init container that
// keeps running), in JSON as well as YAML.
func TestInjectWorkloadTemplate(t *testing.T) {
	out := inject(t, "deployment.json", Options{Mode: DevicePlugin})
	golden(t, "deployment-deviceplugin.golden.yaml", out)
	if !strings.Contains(string(out), "neureality.ai/ai_hypervisor_queue: \"7\"") {
		t.Fatalf("no queues in\n%s", out)
	}
}

func TestInjectRefuses(t *testing.T) {
	pod := "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: main, image: x}]\n"
	for _, tc := range []struct {
		name, in string
		o        Options
		want     string
	}{
		{"no such container", pod, Options{Mode: DevicePlugin}, `object 1 (Pod p): no container "health-handler" (containers: main)`},
		{"two containers with the device plugin", pod, Options{Mode: DevicePlugin, Containers: []string{"a", "b"}}, "name one container, not 2"},
		{"unknown mode", pod, Options{Mode: "cdi"}, `mode "cdi"`},
		{"no pod", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", Options{Mode: DRA}, "no pod or pod template found"},
		{"not YAML", "kind: [", Options{Mode: DRA}, "object 1:"},
		{"no name for the template", "kind: Pod\nspec:\n  containers: [{name: health-handler}]\n", Options{Mode: DRA}, "no metadata.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Inject(strings.NewReader(tc.in), &out, resnet50, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("wrote %q despite the error", out.String())
			}
		})
	}
}
