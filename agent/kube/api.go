// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"fmt"
	"log/slog"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
)

// API is the agent's one connection to the API server, made once at start: each stage
// takes from it the client it needs. Nothing is asked of the server to make it; a
// connection that cannot be made (no kubeconfig given and no in-cluster environment, a
// kubeconfig refused) is what "no API server" means, decided in one place (Connect).
type API struct {
	host                         string
	core, apps, policy, resource rest.Interface
}

// Connect makes the connection with kubeconfig, or in-cluster when it is empty.
func Connect(kubeconfig string) (*API, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	cfg.UserAgent = "nr1-agent"
	a := &API{host: cfg.Host}
	if a.core, err = restClient(cfg, corev1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if a.apps, err = restClient(cfg, appsv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if a.policy, err = restClient(cfg, policyv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if a.resource, err = restClient(cfg, resourceapi.SchemeGroupVersion); err != nil {
		return nil, err
	}
	return a, nil
}

// Host is the API server's address.
func (a *API) Host() string { return a.host }

// Events is the client of the agent's actions on node: Events on pods, evictions,
// pods marked disrupted.
func (a *API) Events(node string, log *slog.Logger) *Client {
	return newClient(restEvents{a.core}, restPods(a.core), restStatus(a.core), restEvictions{a.policy}, node, log, timeouts{call: callTimeout, lookup: lookupTimeout})
}

// Namespaces follows the namespaces' labels; labels not known current for maxAge are
// unknown. Run starts it.
func (a *API) Namespaces(maxAge time.Duration, log *slog.Logger) *Namespaces {
	return newNamespaces(&restNamespaces{rest: a.core}, maxAge, clock.RealClock{}, log)
}

// Resources is what the DRA driver asks of the API server.
func (a *API) Resources() *Resources { return &Resources{core: a.core, resource: a.resource} }

// Node is the node called name.
func (a *API) Node(name string) *Node { return &Node{core: a.core, name: name} }

// Removal follows the DaemonSet of the pod namespace/name; Run starts it.
func (a *API) Removal(namespace, pod string, log *slog.Logger) *Removal {
	return newRemoval(restPods(a.core), &restDaemonSets{rest: a.apps, namespace: namespace}, namespace, pod, log)
}
