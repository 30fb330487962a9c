//go:build ignore

// gen writes the standalone strict JSON schemas of the Kubernetes kinds
// deploy/kubernetes uses, from Kubernetes' OpenAPI v2 document, the way
// yannh/kubernetes-json-schema's "-standalone-strict" folders are made
// (instrumenta/openapi2jsonschema --kubernetes --expanded --stand-alone
// --strict): IntOrString becomes string or integer, Quantity string or
// number; apiVersion and kind get an enum from
// x-kubernetes-group-version-kind; every $ref is inlined; every object
// schema with properties and no additionalProperties gets
// additionalProperties: false; every type but a required property's also
// admits null. Descriptions are dropped (they do not validate anything and
// would make the files five times larger).
//
//	go mod download -json k8s.io/kubernetes@v1.30.0     # prints its Dir
//	go run deploy/kubernetes/testdata/schema/gen.go \
//	    -swagger $DIR/api/openapi-spec/swagger.json \
//	    -out deploy/kubernetes/testdata/schema/v1.30.0-standalone-strict
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// kinds maps each definition to write to its file name (yannh's naming).
var kinds = map[string]string{
	"io.k8s.api.core.v1.Service":     "service-v1.json",
	"io.k8s.api.apps.v1.StatefulSet": "statefulset-apps-v1.json",
	"io.k8s.api.batch.v1.Job":        "job-batch-v1.json",
}

func main() {
	swagger := flag.String("swagger", "", "Kubernetes' api/openapi-spec/swagger.json")
	out := flag.String("out", "", "folder to write the schemas to")
	flag.Parse()
	b, err := os.ReadFile(*swagger)
	if err != nil {
		log.Fatal(err)
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		log.Fatal(err)
	}
	defs := doc.Definitions
	defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
	defs["io.k8s.apimachinery.pkg.api.resource.Quantity"] = map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}
	for _, d := range defs {
		gvks, _ := d["x-kubernetes-group-version-kind"].([]any)
		props, _ := d["properties"].(map[string]any)
		for _, g := range gvks {
			gvk := g.(map[string]any)
			av := gvk["version"].(string)
			if gr := gvk["group"].(string); gr != "" {
				av = gr + "/" + av
			}
			if p, ok := props["apiVersion"].(map[string]any); ok {
				p["enum"] = appendNew(p["enum"], av)
			}
			if p, ok := props["kind"].(map[string]any); ok {
				p["enum"] = appendNew(p["enum"], gvk["kind"].(string))
			}
		}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	for name, file := range kinds {
		s, err := inline(defs, map[string]any{"$ref": "#/definitions/" + name}, nil)
		if err != nil {
			log.Fatalf("%s: %v", name, err)
		}
		m := s.(map[string]any)
		if _, ok := m["type"]; !ok {
			m["type"] = "object"
		}
		strict(m)
		nullable(m, true) // the document itself is an object, never null
		b, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*out, file), append(b, '\n'), 0o644); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %d bytes\n", file, len(b)+1)
	}
}

func appendNew(list any, v string) []any {
	l, _ := list.([]any)
	if !slices.Contains(l, any(v)) {
		l = append(l, v)
	}
	return l
}

// inline returns a deep copy of v with every $ref replaced by a copy of its
// definition (a $ref's siblings, such as description, are dropped, as
// jsonref does); stack holds the definitions being inlined, to refuse a
// cycle. Descriptions are left out.
func inline(defs map[string]map[string]any, v any, stack []string) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok {
			name, ok := strings.CutPrefix(ref, "#/definitions/")
			if !ok || defs[name] == nil {
				return nil, fmt.Errorf("unknown $ref %q", ref)
			}
			if slices.Contains(stack, name) {
				return nil, fmt.Errorf("recursive $ref %q (through %v)", ref, stack)
			}
			return inline(defs, map[string]any(defs[name]), append(stack, name))
		}
		m := make(map[string]any, len(v))
		for k, x := range v {
			if k == "description" || k == "x-kubernetes-group-version-kind" {
				continue
			}
			c, err := inline(defs, x, stack)
			if err != nil {
				return nil, err
			}
			m[k] = c
		}
		return m, nil
	case []any:
		l := make([]any, len(v))
		for i, x := range v {
			c, err := inline(defs, x, stack)
			if err != nil {
				return nil, err
			}
			l[i] = c
		}
		return l, nil
	}
	return v, nil
}

// strict sets additionalProperties: false on every object schema that
// lists properties and says nothing of others (kubectl's validation).
func strict(v any) {
	switch v := v.(type) {
	case map[string]any:
		if _, ok := v["properties"]; ok {
			if _, ok := v["additionalProperties"]; !ok {
				v["additionalProperties"] = false
			}
		}
		for _, x := range v {
			strict(x)
		}
	case []any:
		for _, x := range v {
			strict(x)
		}
	}
}

// nullable lets every type also be null, except a required property's.
func nullable(v any, required bool) {
	switch v := v.(type) {
	case map[string]any:
		if t, ok := v["type"].(string); ok && !required && t != "null" {
			v["type"] = []any{t, "null"}
		}
		req, _ := v["required"].([]any)
		for k, x := range v {
			if k == "properties" {
				for name, p := range x.(map[string]any) {
					nullable(p, slices.Contains(req, any(name)))
				}
				continue
			}
			if k == "enum" || k == "required" {
				continue
			}
			nullable(x, false)
		}
	case []any:
		for _, x := range v {
			nullable(x, false)
		}
	}
}
