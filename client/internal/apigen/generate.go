// Package apigen holds the types and low-level HTTP calls generated from
// api/openapi.yaml by oapi-codegen. Package client wraps them in the retry
// policy of the contract; use that package, not this one.
package apigen

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../../api/openapi.yaml
