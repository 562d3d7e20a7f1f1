// Package api holds the OpenAPI description of the service, served at
// GET /openapi.yaml.
package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the HTTP API.
//
//go:embed openapi.yaml
var OpenAPI []byte
