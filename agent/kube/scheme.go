// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
)

// The agent's scheme holds only the API types it reads and writes. client-go's typed
// clients register every API group of Kubernetes in theirs, and any one of them linked
// in brings all of those types into the binary: about a third of it.
var (
	scheme         = runtime.NewScheme()
	codecs         serializer.CodecFactory
	parameterCodec runtime.ParameterCodec
)

func init() {
	utilruntime.Must(corev1.AddToScheme(scheme))
	utilruntime.Must(appsv1.AddToScheme(scheme))
	utilruntime.Must(policyv1.AddToScheme(scheme))
	utilruntime.Must(resourceapi.AddToScheme(scheme))
	codecs = serializer.NewCodecFactory(scheme)
	parameterCodec = runtime.NewParameterCodec(scheme)
}

// restClient is a REST client of one API group version, with the agent's scheme.
func restClient(cfg *rest.Config, gv schema.GroupVersion) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	if gv.Group == "" {
		c.APIPath = "/api"
	}
	c.NegotiatedSerializer = codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client for %s: %w", gv, err)
	}
	return rc, nil
}
