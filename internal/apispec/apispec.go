// Package apispec merges what the registered operations contribute into
// the OpenAPI document (api/openapi.yaml): each module's own part
// (operation.Module.Spec: its paths and schemas), its problem codes
// (ProblemCodes) into the ProblemCode enum, the names of its events into
// the EventType enum, and its resource's id member (Resource.IDField) into
// the Problem schema. So registering a module edits no shared part of the
// spec by hand: `make spec` writes the merge back to api/openapi.yaml,
// which stays the one whole document clients generate from, and
// TestTheSpecHoldsEveryRegisteredModule fails until it is run.
package apispec

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/paymentsapi/paymentsapi/internal/operation"
)

// Merge returns doc with what mods contribute. Paths and schemas a module
// declares replace those of the same name; enum values and Problem members
// are added when missing. Merging what doc holds already changes nothing.
func Merge(doc []byte, mods []operation.Module) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("apispec: the document: %w", err)
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 {
		return nil, fmt.Errorf("apispec: the document is not one YAML document")
	}
	top := root.Content[0]
	schemas := path(top, "components", "schemas")
	if schemas == nil {
		return nil, fmt.Errorf("apispec: the document has no components.schemas")
	}
	for _, m := range mods {
		if err := mergeModule(top, schemas, m); err != nil {
			return nil, fmt.Errorf("apispec: module %s: %w", m.Name, err)
		}
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, err
	}
	return out.Bytes(), enc.Close()
}

func mergeModule(top, schemas *yaml.Node, m operation.Module) error {
	if len(m.Spec) > 0 {
		var frag yaml.Node
		if err := yaml.Unmarshal(m.Spec, &frag); err != nil {
			return fmt.Errorf("its Spec: %w", err)
		}
		if len(frag.Content) == 1 {
			f := frag.Content[0]
			if paths := path(f, "paths"); paths != nil {
				into := path(top, "paths")
				if into == nil {
					return fmt.Errorf("the document has no paths")
				}
				setAll(into, paths)
			}
			if s := path(f, "components", "schemas"); s != nil {
				setAll(schemas, s)
			}
		}
	}
	for _, code := range m.ProblemCodes {
		if err := addEnum(schemas, "ProblemCode", string(code)); err != nil {
			return err
		}
	}
	for _, e := range m.Events {
		if e.Name == "" {
			continue
		}
		if err := addEnum(schemas, "EventType", e.Name); err != nil {
			return err
		}
	}
	props := path(schemas, "Problem", "properties")
	if props == nil {
		return fmt.Errorf("the document has no Problem schema")
	}
	if get(props, m.Resource.IDField) == nil {
		member := &yaml.Node{Kind: yaml.MappingNode}
		set(member, "type", scalar("string"))
		set(member, "description", scalar(fmt.Sprintf("The %s concerned, with its operation's problems and IDEMPOTENCY_KEY_EXPIRED.", m.Resource.Type)))
		set(props, m.Resource.IDField, member)
	}
	return nil
}

// Equal reports whether two documents hold the same values, whatever
// their layout and comments.
func Equal(a, b []byte) (bool, error) {
	var va, vb any
	if err := yaml.Unmarshal(a, &va); err != nil {
		return false, err
	}
	if err := yaml.Unmarshal(b, &vb); err != nil {
		return false, err
	}
	return reflect.DeepEqual(va, vb), nil
}

// addEnum adds value to the enum of schema name, if it is missing.
func addEnum(schemas *yaml.Node, name, value string) error {
	enum := path(schemas, name, "enum")
	if enum == nil || enum.Kind != yaml.SequenceNode {
		return fmt.Errorf("the document's %s has no enum", name)
	}
	if slices.ContainsFunc(enum.Content, func(n *yaml.Node) bool { return n.Value == value }) {
		return nil
	}
	enum.Content = append(enum.Content, scalar(value))
	return nil
}

// path is the node at keys under mapping m, or nil.
func path(m *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if m = get(m, k); m == nil {
			return nil
		}
	}
	return m
}

func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// set sets key of mapping m to v, in its place when m has it, else last.
func set(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, scalar(key), v)
}

// setAll sets every key of mapping from in mapping m.
func setAll(m, from *yaml.Node) {
	for i := 0; i+1 < len(from.Content); i += 2 {
		set(m, from.Content[i].Value, from.Content[i+1])
	}
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }
