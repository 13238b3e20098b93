package server

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/kairos-dev/kairos/doc"
)

// openapiContentType is the media type of YAML (RFC 9512).
const openapiContentType = "application/yaml"

// serveOpenAPI serves GET /openapi.yaml on the admin listener: the OpenAPI
// 3.1 description of both APIs (doc/openapi.yaml, embedded). Open, like
// /version: it holds no secret.
func (s *Server) serveOpenAPI(c *gin.Context) {
	c.Data(http.StatusOK, openapiContentType, doc.OpenAPI)
}
