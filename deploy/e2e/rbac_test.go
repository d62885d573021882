// SPDX-License-Identifier: Apache-2.0

//go:build e2eafter

// The agent's RBAC, checked against what it did: run by make e2e after every e2e suite,
// from the API server's audit log of the agent's own requests (deploy/local/stack.sh).
package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

const agentUser = "system:serviceaccount:nr1-system:nr1-agent"

// auditEvent is what the check reads of an audit.k8s.io/v1 Event.
type auditEvent struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		APIGroup    string `json:"apiGroup"`
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// call is one kind of request: what an RBAC rule grants.
type call struct {
	group, resource, verb, namespace, name string
}

func (c call) String() string {
	s := c.verb + " " + c.resource
	if c.group != "" {
		s += "." + c.group
	}
	if c.namespace != "" {
		s += " in " + c.namespace
	}
	if c.name != "" {
		s += " named " + c.name
	}
	return s
}

// grant is one rule of the agent's, scoped to a namespace for a Role.
type grant struct {
	rule      rbacv1.PolicyRule
	namespace string // "" for the ClusterRole
	from      string
}

func (g grant) allows(c call) bool {
	in := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	return (g.namespace == "" || g.namespace == c.namespace) &&
		in(g.rule.APIGroups, c.group) && in(g.rule.Resources, c.resource) && in(g.rule.Verbs, c.verb) &&
		(len(g.rule.ResourceNames) == 0 || slices.Contains(g.rule.ResourceNames, c.name))
}

// agentGrants reads the ClusterRoles and the Role the manifests give the agent: the
// base's, and DRA mode's (the e2e suites run both modes).
func agentGrants(t *testing.T) []grant {
	var docs []string
	for _, f := range []string{"../kustomize/base/rbac.yaml", "../kustomize/components/dra/dra.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, strings.Split(string(b), "\n---\n")...)
	}
	var grants []grant
	for _, doc := range docs {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("rbac.yaml: %v", err)
		}
		switch head.Kind {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
				t.Fatalf("rbac.yaml: %v", err)
			}
			for _, rule := range r.Rules {
				grants = append(grants, grant{rule: rule, from: "ClusterRole " + r.Name})
			}
		case "Role":
			var r rbacv1.Role
			if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
				t.Fatalf("rbac.yaml: %v", err)
			}
			for _, rule := range r.Rules {
				// The kustomization puts the Role in the agent's namespace.
				grants = append(grants, grant{rule: rule, namespace: "nr1-system", from: "Role " + r.Name})
			}
		}
	}
	if len(grants) == 0 {
		t.Fatal("rbac.yaml: no rules")
	}
	return grants
}

// agentCalls reads the audit log: every request the agent made, and those refused.
func agentCalls(t *testing.T) (calls map[call]int, refused, nonResource []string) {
	path := os.Getenv("NR1_AUDIT_LOG")
	if path == "" {
		t.Fatal("NR1_AUDIT_LOG not set (run through make e2e)")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	calls = map[call]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if e.User.Username != agentUser || e.Stage == "ResponseStarted" && e.Verb != "watch" {
			continue
		}
		if e.ResponseStatus != nil && e.ResponseStatus.Code == 403 {
			refused = append(refused, e.Verb+" "+e.RequestURI)
		}
		if e.ObjectRef == nil {
			nonResource = append(nonResource, e.Verb+" "+e.RequestURI)
			continue
		}
		r := e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			r += "/" + e.ObjectRef.Subresource
		}
		calls[call{group: e.ObjectRef.APIGroup, resource: r, verb: e.Verb, namespace: e.ObjectRef.Namespace, name: e.ObjectRef.Name}]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return calls, refused, nonResource
}

// Every request the agent made during the e2e suites is granted by its rules, and every
// verb of every rule was used: the rules are what the code calls.
func TestAgentCallsMatchItsRBAC(t *testing.T) {
	grants := agentGrants(t)
	calls, refused, nonResource := agentCalls(t)
	if len(calls) == 0 {
		t.Fatal("the audit log holds no request of the agent's")
	}
	// Refusals are not failures by themselves: the suites take rights away on purpose
	// (the namespaces' labels made unknown), and an Event in a namespace being deleted is
	// refused. A call no rule grants is caught below whatever its answer.
	if len(refused) > 0 {
		t.Logf("refused by the API server (%d): %s", len(refused), strings.Join(refused, "; "))
	}
	if len(nonResource) > 0 {
		t.Errorf("requests outside the resource API (discovery needs no rule of the agent's): %v", nonResource)
	}
	used := map[string]bool{}
	kinds := map[string]int{}
	for c, n := range calls {
		kinds[call{group: c.group, resource: c.resource, verb: c.verb}.String()] += n
		granted := false
		for _, g := range grants {
			if g.allows(c) {
				granted = true
				for _, v := range g.rule.Verbs {
					if v == c.verb {
						used[fmt.Sprintf("%s: %s %s", g.from, v, c.resource)] = true
					}
				}
			}
		}
		if !granted {
			t.Errorf("the agent made %d requests no rule of its grants: %s", n, c)
		}
	}
	var summary []string
	for k, n := range kinds {
		summary = append(summary, fmt.Sprintf("%s (%d)", k, n))
	}
	sort.Strings(summary)
	t.Logf("the agent's requests during the e2e suites:\n  %s", strings.Join(summary, "\n  "))
	for _, g := range grants {
		for _, r := range g.rule.Resources {
			for _, v := range g.rule.Verbs {
				if k := fmt.Sprintf("%s: %s %s", g.from, v, r); !used[k] {
					t.Errorf("%s grants %s on %s, which the agent never did in the e2e suites: a rule the code does not need", g.from, v, r)
				}
			}
		}
	}
}
