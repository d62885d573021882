// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// What exempts from enforcement: the annotation a pod may carry, the labels an
// administrator puts on a namespace, and the admission policy holding pods to them.
const (
	exemptionAnnotation    = "nr1.neureality.ai/enforcement"
	exemptLabel            = "nr1.neureality.ai/enforcement"
	allowPodExemptionLabel = "nr1.neureality.ai/allow-pod-exemption"
	exemptionPolicy        = "nr1-agent-pod-exemption"
)

// labelledNamespace creates namespace name with labels, as an administrator would.
func labelledNamespace(t *testing.T, c kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	newNamespace(t, c, name)
	if len(labels) == 0 {
		return
	}
	nss := c.CoreV1().Namespaces()
	ns, err := nss.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range labels {
		ns.Labels[k] = v
	}
	if _, err := nss.Update(context.Background(), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// selfExempting is nr1-load in namespace ns with args, annotated to exempt itself.
func selfExempting(name, ns string, args ...string) *corev1.Pod {
	p := loadPod(name, args...)
	p.Namespace = ns
	p.Annotations = map[string]string{exemptionAnnotation: "disabled"}
	return p
}

// leftAlone checks that the agent sees pod holding 20 queues of 7 (its namespace's labels
// known to it as want) and does nothing about it for the default ladder's whole length.
func leftAlone(t *testing.T, c kubernetes.Interface, pod *corev1.Pod, want map[string]string) {
	t.Helper()
	began := time.Now()
	eventually(t, 30*time.Second, pod.Name+" seen by the agent over its budget", func() error {
		snap, err := agentDebug(t, c)
		if err != nil {
			return err
		}
		cg := snap.CG(string(pod.UID))
		switch {
		case cg == nil:
			return fmt.Errorf("not in /debug/cgs")
		case !cg.AllocationKnown || cg.Usage[nr1.HypervisorQueue] != 20:
			return fmt.Errorf("allocation known %v, usage %v", cg.AllocationKnown, cg.Usage)
		case cg.NamespaceUnknown != "":
			return fmt.Errorf("namespace labels unknown: %s", cg.NamespaceUnknown)
		}
		for k, v := range want {
			if cg.NamespaceLabels[k] != v {
				return fmt.Errorf("namespace labels %v, want %s=%s", cg.NamespaceLabels, k, v)
			}
		}
		return nil
	})
	time.Sleep(25 * time.Second) // past the whole default ladder, and its hard ratio
	untouched(t, c, pod)
	t.Logf("%s: 20 queues of 7 for %v, left alone", pod.Name, time.Since(began).Round(time.Second))
}

// TestExemption: only an administrator exempts. The admission policy refuses a pod's
// annotation where its namespace does not allow it; where it does, and in a namespace
// labelled exempt, an over-budget CG is left alone. Without the policy's binding (an
// administrator may remove it) the annotation is admitted, but the agent ignores it,
// says so once in an Event, and enforces as usual.
func TestExemption(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	resources, err := c.Discovery().ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	if err != nil {
		t.Fatalf("admissionregistration.k8s.io/v1: %v", err)
	}
	served := false
	for _, r := range resources.APIResources {
		served = served || r.Name == "validatingadmissionpolicies"
	}
	if !served {
		t.Fatal("the API server does not serve ValidatingAdmissionPolicy")
	}
	admission := c.AdmissionregistrationV1()
	eventually(t, 30*time.Second, "the policy type-checked", func() error {
		p, err := admission.ValidatingAdmissionPolicies().Get(ctx, exemptionPolicy, metav1.GetOptions{})
		switch {
		case err != nil:
			return err
		case p.Status.TypeChecking == nil:
			return fmt.Errorf("not type-checked yet")
		case len(p.Status.TypeChecking.ExpressionWarnings) > 0:
			t.Fatalf("type-checking warnings: %+v", p.Status.TypeChecking.ExpressionWarnings)
		}
		return nil
	})
	binding, err := admission.ValidatingAdmissionPolicyBindings().Get(ctx, exemptionPolicy, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the policy's binding: %v", err)
	}

	const plain, allowing, exempt = "nr1-exempt-plain", "nr1-exempt-allowing", "nr1-exempt-namespace"
	labelledNamespace(t, c, plain, nil)
	labelledNamespace(t, c, allowing, map[string]string{allowPodExemptionLabel: "true"})
	labelledNamespace(t, c, exempt, map[string]string{exemptLabel: "disabled"})

	t.Run("refused where the namespace does not allow it", func(t *testing.T) {
		wantRefused := func(what string, err error) {
			t.Helper()
			switch {
			case err == nil:
				t.Errorf("%s: admitted", what)
			case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), exemptionPolicy) ||
				!strings.Contains(err.Error(), "the annotation nr1.neureality.ai/enforcement=disabled is not allowed in namespace "+plain):
				t.Errorf("%s: %v, want refused by %s", what, err, exemptionPolicy)
			default:
				t.Logf("%s: %v", what, err)
			}
		}
		_, err := c.CoreV1().Pods(plain).Create(ctx, selfExempting("self-exempt", plain, "--queues=20"), metav1.CreateOptions{})
		wantRefused("created with the annotation", err)

		p := loadPod("adds-it-later", "--queues=1")
		p.Namespace = plain
		created := createPod(t, c, p)
		annotate := func(value string) error {
			// The kubelet updates the pod meanwhile: a conflict is not the answer sought.
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur, err := c.CoreV1().Pods(plain).Get(ctx, created.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Annotations = map[string]string{exemptionAnnotation: value}
				_, err = c.CoreV1().Pods(plain).Update(ctx, cur, metav1.UpdateOptions{})
				return err
			})
		}
		wantRefused("annotated by an update", annotate("disabled"))
		if err := annotate("enabled"); err != nil { // enforcement as usual: allowed anywhere
			t.Errorf("annotated enabled: %v", err)
		}
	})

	t.Run("left alone", func(t *testing.T) {
		t.Run("annotated where its namespace allows it", func(t *testing.T) {
			t.Parallel()
			pod := running(t, c, createPod(t, c, selfExempting("allowed-hog", allowing, "--queues=20")))
			leftAlone(t, c, pod, map[string]string{allowPodExemptionLabel: "true"})
		})
		t.Run("in a namespace labelled exempt", func(t *testing.T) {
			t.Parallel()
			p := loadPod("exempt-ns-hog", "--queues=20")
			p.Namespace = exempt
			pod := running(t, c, createPod(t, c, p))
			leftAlone(t, c, pod, map[string]string{exemptLabel: "disabled"})
		})
	})

	t.Run("without the policy's binding: admitted, ignored, reported, killed", func(t *testing.T) {
		bindings := admission.ValidatingAdmissionPolicyBindings()
		if err := bindings.Delete(ctx, exemptionPolicy, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		t.Cleanup(func() {
			b := &binding.ObjectMeta
			restored := binding.DeepCopy()
			restored.ObjectMeta = metav1.ObjectMeta{Name: b.Name, Labels: b.Labels, Annotations: b.Annotations}
			if _, err := bindings.Create(context.Background(), restored, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Errorf("restoring the policy's binding: %v", err)
			}
		})
		// Over after 4 s, so that the pod is seen Running before it is killed.
		p := selfExempting("self-exempt-hog", plain, "--queues=2", "--step=4s:queues=20")
		var created *corev1.Pod
		eventually(t, 30*time.Second, "admitted once the binding is gone", func() error {
			var err error
			created, err = c.CoreV1().Pods(plain).Create(ctx, p, metav1.CreateOptions{})
			return err
		})
		admitted := time.Now()
		zero := int64(0)
		t.Cleanup(func() {
			_ = c.CoreV1().Pods(plain).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
		diagnose(t, c, created)
		pod := running(t, c, created)
		bad := waitReason(t, c, pod, "NR1BadAnnotation", 30*time.Second)
		killed := waitReason(t, c, pod, "NR1Killed", 30*time.Second)
		term := terminated(t, c, pod, 30*time.Second)
		h := holdings(t, c, pod)
		if len(h) != 2 || !strings.Contains(h[1].line, "queues=20") {
			t.Fatalf("nr1-load's changes: %+v", h)
		}
		finished := criFinishedAt(t, term.ContainerID)
		t.Logf("binding deleted %s, pod admitted %s (%v later); NR1BadAnnotation at %s: %q",
			clock(deleted), clock(admitted), admitted.Sub(deleted).Round(time.Millisecond), bad.FirstTimestamp.Format("15:04:05"), bad.Message)
		t.Logf("20 queues held %s; NR1Killed at %s; container finished %s, %v after going over; events %s",
			clock(h[1].at), killed.FirstTimestamp.Format("15:04:05"), clock(finished), finished.Sub(h[1].at).Round(time.Millisecond), reasons(nr1Events(t, c, pod)))

		if !strings.Contains(bad.Message, "namespace "+plain+" does not allow") || !strings.Contains(bad.Message, "ignored") {
			t.Errorf("NR1BadAnnotation %q, want the annotation said to be ignored, and why", bad.Message)
		}
		if bad.Count != 1 {
			t.Errorf("NR1BadAnnotation recorded %d times, want once", bad.Count)
		}
		if got := reasons(nr1Events(t, c, pod)); got != "NR1BadAnnotation,NR1LimitExceeded,NR1Killed" {
			t.Errorf("events %s, want the annotation reported, then the ladder as for any CG", got)
		}
		if lag := finished.Sub(h[1].at); lag < 0 || lag > 2500*time.Millisecond {
			t.Errorf("kill latency %v, want at most 2.5 s as for any queue hog", lag)
		}
	})

	t.Run("namespace labels unknown: nothing done until they are known", func(t *testing.T) {
		unknownLabels(t, c, plain)
	})
}

// unknownLabels takes from the agent the right to read namespaces and restarts it: its
// namespace labels are then unknown, and an over-budget CG in namespace ns, which a label
// could exempt, is left alone. Once the right is given back the CG is killed.
func unknownLabels(t *testing.T, c kubernetes.Interface, ns string) {
	ctx := context.Background()
	roles := c.RbacV1().ClusterRoles()
	role, err := roles.Get(ctx, "nr1-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	granted := role.DeepCopy()
	restore := func() {
		cur, err := roles.Get(context.Background(), "nr1-agent", metav1.GetOptions{})
		if err == nil {
			cur.Rules = granted.Rules
			_, err = roles.Update(context.Background(), cur, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Errorf("giving the agent its ClusterRole back: %v", err)
		}
	}
	t.Cleanup(restore) // a no-op unless the test failed before
	var kept []rbacv1.PolicyRule
	for _, r := range role.Rules {
		if !slices.Contains(r.Resources, "namespaces") {
			kept = append(kept, r)
		}
	}
	role.Rules = kept
	if _, err := roles.Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	run(t, "kubectl", "-n", "nr1-system", "rollout", "restart", "daemonset/nr1-agent")
	run(t, "kubectl", "-n", "nr1-system", "rollout", "status", "daemonset/nr1-agent", "--timeout=120s")
	mustReadyAgent(t, c)

	p := loadPod("unknown-ns-hog", "--queues=20")
	p.Namespace = ns
	pod := running(t, c, createPod(t, c, p))
	diagnose(t, c, pod)
	var why string
	eventually(t, 30*time.Second, pod.Name+" seen over its budget, its namespace's labels unknown", func() error {
		snap, err := agentDebug(t, c)
		if err != nil {
			return err
		}
		cg := snap.CG(string(pod.UID))
		switch {
		case cg == nil:
			return fmt.Errorf("not in /debug/cgs")
		case !cg.AllocationKnown || cg.Usage[nr1.HypervisorQueue] != 20:
			return fmt.Errorf("allocation known %v, usage %v", cg.AllocationKnown, cg.Usage)
		case !strings.Contains(cg.NamespaceUnknown, "forbidden"):
			return fmt.Errorf("namespace labels %v, unknown %q", cg.NamespaceLabels, cg.NamespaceUnknown)
		}
		why = cg.NamespaceUnknown
		return nil
	})
	time.Sleep(15 * time.Second) // the hard ratio would have killed it at once
	untouched(t, c, pod)

	restore()
	restored := time.Now()
	killed := waitReason(t, c, pod, "NR1Killed", 40*time.Second)
	term := terminated(t, c, pod, 30*time.Second)
	finished := criFinishedAt(t, term.ContainerID)
	t.Logf("labels unknown (%s): %s over its budget for 15 s, left alone; namespaces readable again %s, NR1Killed at %s, container finished %s (%v later); events %s",
		why, pod.Name, clock(restored), killed.FirstTimestamp.Format("15:04:05"), clock(finished), finished.Sub(restored).Round(time.Millisecond), reasons(nr1Events(t, c, pod)))
	if got := reasons(nr1Events(t, c, pod)); got != "NR1LimitExceeded,NR1Killed" {
		t.Errorf("events %s, want the ladder as for any CG once the labels are known", got)
	}
}

// TestNamespaceExemptionIsTheAdministrators: whoever may label a namespace could exempt
// it. The policy lets only an administrator give a namespace an exempting label; a
// tenant allowed to update namespaces may keep or take one away, never add one.
func TestNamespaceExemptionIsTheAdministrators(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	const policy = "nr1-agent-namespace-exemption"
	const plain, exempt = "nr1-labels-plain", "nr1-labels-exempt"
	labelledNamespace(t, c, plain, nil) // as an administrator (system:masters)
	labelledNamespace(t, c, exempt, map[string]string{exemptLabel: "disabled"})

	// A tenant allowed to create and update namespaces.
	const tenant = "nr1-e2e-tenant"
	grant(t, c, tenant, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "create", "update", "patch"}})
	as := func(groups ...string) kubernetes.Interface {
		cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Impersonate = rest.ImpersonationConfig{UserName: tenant, Groups: append([]string{"system:authenticated"}, groups...)}
		kc, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return kc
	}
	dryRun := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	relabel := func(kc kubernetes.Interface, name string, change func(map[string]string)) error {
		ns, err := c.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		change(ns.Labels)
		_, err = kc.CoreV1().Namespaces().Update(ctx, ns, dryRun)
		return err
	}
	refused := func(what, label string, err error) error {
		switch {
		case err == nil:
			return fmt.Errorf("%s: admitted", what)
		case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), policy) || !strings.Contains(err.Error(), "only an administrator") || !strings.Contains(err.Error(), label):
			return fmt.Errorf("%s: %w, want refused by %s naming %s", what, err, policy, label)
		}
		t.Logf("%s: %v", what, err)
		return nil
	}
	tenantClient := as()
	eventually(t, 30*time.Second, "a tenant labelling a namespace exempt refused", func() error {
		return refused("a tenant labelling a namespace exempt", exemptLabel+"=disabled",
			relabel(tenantClient, plain, func(l map[string]string) { l[exemptLabel] = "disabled" }))
	})
	if err := refused("a tenant letting a namespace's pods exempt themselves", allowPodExemptionLabel+"=true",
		relabel(tenantClient, plain, func(l map[string]string) { l[allowPodExemptionLabel] = "true" })); err != nil {
		t.Error(err)
	}
	created := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nr1-labels-born-exempt", Labels: map[string]string{exemptLabel: "disabled"}}}
	_, err := tenantClient.CoreV1().Namespaces().Create(ctx, created, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err := refused("a tenant creating a namespace labelled exempt", exemptLabel+"=disabled", err); err != nil {
		t.Error(err)
	}
	for what, change := range map[string]func(map[string]string){
		"keeping the exempt label, adding another": func(l map[string]string) { l["team"] = "vision" },
		"taking the exempt label away":             func(l map[string]string) { delete(l, exemptLabel) },
	} {
		if err := relabel(tenantClient, exempt, change); err != nil {
			t.Errorf("a tenant %s: %v", what, err)
		}
	}
	if err := relabel(as("nr1.neureality.ai:exemption-admins"), plain, func(l map[string]string) { l[exemptLabel] = "disabled" }); err != nil {
		t.Errorf("an administrator of group nr1.neureality.ai:exemption-admins labelling a namespace exempt: %v", err)
	}
	subresourceTenant(t, c, plain, refused)
}

// grant gives the user named user the rule, cluster-wide, for the test's time.
func grant(t *testing.T, c kubernetes.Interface, user string, rule rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{rule}}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.RbacV1().ClusterRoles().Delete(context.Background(), user, metav1.DeleteOptions{}) })
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.RbacV1().ClusterRoleBindings().Delete(context.Background(), user, metav1.DeleteOptions{})
	})
}

// subresourceTenant: namespaces/status and namespaces/finalize keep the labels of their
// request as an update does. A user allowed only those (and pods/status, which keeps a
// pod's annotations) gives no exempting label or annotation through them; the same user
// changing another label through each is admitted, so the refusals are the policies'.
func subresourceTenant(t *testing.T, c kubernetes.Interface, plain string, refused func(what, label string, err error) error) {
	ctx := context.Background()
	const tenant = "nr1-e2e-status-tenant"
	grant(t, c, tenant, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces/status", "namespaces/finalize", "pods/status"}, Verbs: []string{"update", "patch"}})
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: tenant, Groups: []string{"system:authenticated"}}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dryRun := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	through := map[string]func(*corev1.Namespace) error{
		"namespaces/status": func(ns *corev1.Namespace) error {
			_, err := kc.CoreV1().Namespaces().UpdateStatus(ctx, ns, dryRun)
			return err
		},
		"namespaces/finalize": func(ns *corev1.Namespace) error {
			_, err := kc.CoreV1().Namespaces().Finalize(ctx, ns, dryRun)
			return err
		},
	}
	labelled := func(key, value string) *corev1.Namespace {
		ns, err := c.CoreV1().Namespaces().Get(ctx, plain, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(ns.Labels, exemptLabel)
		delete(ns.Labels, allowPodExemptionLabel)
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[key] = value
		return ns
	}
	for sub, update := range through {
		// The plain namespace as the administrator left it may be exempt already: each
		// request starts from it without the exempting labels, so only the request adds one.
		eventually(t, 30*time.Second, "a tenant with only "+sub+" admitted for another label", func() error {
			return update(labelled("team", "vision"))
		})
		for key, value := range map[string]string{exemptLabel: "disabled", allowPodExemptionLabel: "true"} {
			if err := refused("a tenant with only "+sub+" labelling a namespace "+key+"="+value, key+"="+value, update(labelled(key, value))); err != nil {
				t.Error(err)
			}
		}
	}

	// A pod never scheduled (its node does not exist), annotated through pods/status.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "status-only", Namespace: plain},
		Spec: corev1.PodSpec{NodeName: "nr1-no-such-node", Containers: []corev1.Container{{Name: "c", Image: "nr1-no-such-image"}}}}
	pod, err = c.CoreV1().Pods(plain).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.CoreV1().Pods(plain).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	annotated := func(key, value string) error {
		p := pod.DeepCopy()
		p.Annotations = map[string]string{key: value}
		_, err := kc.CoreV1().Pods(plain).UpdateStatus(ctx, p, dryRun)
		return err
	}
	if err := annotated("team", "vision"); err != nil {
		t.Errorf("a tenant with only pods/status annotating a pod otherwise: %v", err)
	}
	err = annotated(exemptionAnnotation, "disabled")
	if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), exemptionPolicy) {
		t.Errorf("a tenant with only pods/status annotating a pod exempt: %v, want refused by %s", err, exemptionPolicy)
	}
}
