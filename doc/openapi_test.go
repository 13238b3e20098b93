package doc_test

import (
	"context"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/kairos-dev/kairos/doc"
)

// TestOpenAPIValid: openapi.yaml is a valid OpenAPI 3.1 document whose
// references all resolve, with JSON Schema 2020-12 schemas.
func TestOpenAPIValid(t *testing.T) {
	l := openapi3.NewLoader()
	spec, err := l.LoadFromData(doc.OpenAPI)
	if err != nil {
		t.Fatalf("load doc/openapi.yaml: %v", err)
	}
	if !spec.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %q: want 3.1", spec.OpenAPI)
	}
	if err := spec.Validate(context.Background()); err != nil {
		t.Fatalf("doc/openapi.yaml is not a valid OpenAPI document: %v", err)
	}
}
