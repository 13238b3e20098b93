// Package doc holds the documentation that the binary serves: the OpenAPI
// 3.1 description of the public and admin APIs (openapi.yaml, served at the
// admin listener's /openapi.yaml).
package doc

import _ "embed"

// OpenAPI is doc/openapi.yaml, byte for byte.
//
//go:embed openapi.yaml
var OpenAPI []byte
