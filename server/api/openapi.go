package api

import _ "embed"

// OpenAPI is the OpenAPI 3 document of the REST API, served at
// GET /v2/openapi.yaml; docs/openapi.yaml is a copy (a test keeps them
// equal and checks the document against the router's routes).
//
//go:embed openapi.yaml
var OpenAPI []byte
