package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// installCRDs creates every CustomResourceDefinition in dir's *.yaml files, as they are
// written, and waits until each is Established (its API served). It returns their names.
func installCRDs(config *rest.Config, dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.yaml in %s", dir)
	}
	sort.Strings(files)
	client, err := apiextensions.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var names []string
	for _, file := range files {
		docs, err := documents(file)
		if err != nil {
			return nil, err
		}
		for _, doc := range docs {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.UnmarshalStrict(doc, &crd); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			if crd.Kind != "CustomResourceDefinition" {
				continue
			}
			if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			names = append(names, crd.Name)
		}
	}
	for _, name := range names {
		for {
			crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			if established(crd) {
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("CRD %s not established: %w", name, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return names, nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// applyManifest applies every object of a YAML file server-side, as
// `kubectl apply --server-side` would.
func applyManifest(config *rest.Config, file string) error {
	docs, err := documents(file)
	if err != nil {
		return err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, doc := range docs {
		var object unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &object.Object); err != nil {
			return err
		}
		if len(object.Object) == 0 {
			continue
		}
		gvk := object.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, object.GetName(), err)
		}
		resource := client.Resource(mapping.Resource)
		var target dynamic.ResourceInterface = resource
		if mapping.Scope.Name() == "namespace" {
			namespace := object.GetNamespace()
			if namespace == "" {
				namespace = "default"
			}
			target = resource.Namespace(namespace)
		}
		body, err := object.MarshalJSON()
		if err != nil {
			return err
		}
		force := true
		if _, err := target.Patch(ctx, object.GetName(), types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: "controlplane", Force: &force}); err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, object.GetName(), err)
		}
	}
	return nil
}

// documents splits a YAML file into its documents (empty ones dropped).
func documents(file string) ([][]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := reader.Read()
		if err == io.EOF {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
}
