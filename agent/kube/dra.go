package kube

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	resourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1"
	resourcev1beta1 "k8s.io/client-go/kubernetes/typed/resource/v1beta1"
	resourcev1beta2 "k8s.io/client-go/kubernetes/typed/resource/v1beta2"
)

// draClientset is the clientset the DRA kubelet plugin library asks for, with only the
// groups it uses: the core group (the node, owner of the ResourceSlices) and the
// resource group (ResourceClaims, ResourceSlices; the beta versions are its fallback
// for older API servers). The full clientset would more than double the binary; any
// other group is nil and its use a panic, which the e2e tests in DRA mode would meet.
type draClientset struct {
	kubernetes.Interface
	core    *typedcorev1.CoreV1Client
	v1      *resourcev1.ResourceV1Client
	v1beta1 *resourcev1beta1.ResourceV1beta1Client
	v1beta2 *resourcev1beta2.ResourceV1beta2Client
}

func (c *draClientset) CoreV1() typedcorev1.CoreV1Interface                       { return c.core }
func (c *draClientset) ResourceV1() resourcev1.ResourceV1Interface                { return c.v1 }
func (c *draClientset) ResourceV1beta1() resourcev1beta1.ResourceV1beta1Interface { return c.v1beta1 }
func (c *draClientset) ResourceV1beta2() resourcev1beta2.ResourceV1beta2Interface { return c.v1beta2 }

// NewDRAClientset returns the clientset for the DRA kubelet plugin, reached with
// kubeconfig or in-cluster when it is empty.
func NewDRAClientset(kubeconfig string) (kubernetes.Interface, error) {
	core, cfg, err := coreClient(kubeconfig)
	if err != nil {
		return nil, err
	}
	c := &draClientset{core: core}
	if c.v1, err = resourcev1.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if c.v1beta1, err = resourcev1beta1.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if c.v1beta2, err = resourcev1beta2.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return c, nil
}
