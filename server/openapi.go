package server

import (
	_ "embed"
	"net/http"
)

// openAPIDoc is the OpenAPI 3.1 document of the API, served at
// /v1/openapi.json. TestOpenAPIMatchesRoutes checks that it lists exactly
// the registered routes and that its schemas have exactly the fields of
// the Go types in package api.
//
//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the OpenAPI 3.1 document of the API (JSON). The caller
// must not modify it.
func OpenAPI() []byte { return openAPIDoc }

func (h *Handler) openAPI(w http.ResponseWriter, _ *http.Request, _ *caller) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Access-Control-Allow-Origin", "*")
	_, _ = w.Write(openAPIDoc)
	return nil
}
