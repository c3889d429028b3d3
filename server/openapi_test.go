package server

import (
	"bytes"
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gin-gonic/gin"

	"rnnserve/server/api"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/openapi.yaml from server/api/openapi.yaml")

// TestOpenAPI checks the OpenAPI document: it is valid OpenAPI 3 (by
// kin-openapi's validator), it lists exactly the router's routes and
// methods, and docs/openapi.yaml is the document the server serves.
func TestOpenAPI(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("validate: %v", err)
	}
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	s, _ := newTestServer(t, nil, false)
	param := regexp.MustCompile(`:([a-z]+)`)
	var routed []string
	for _, r := range s.Handler().(*gin.Engine).Routes() {
		routed = append(routed, r.Method+" "+param.ReplaceAllString(r.Path, "{$1}"))
	}
	slices.Sort(documented)
	slices.Sort(routed)
	for _, r := range routed {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in the OpenAPI document", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routed, d) {
			t.Errorf("the OpenAPI document lists %s, which the router does not serve", d)
		}
	}
	const docsCopy = "../docs/openapi.yaml"
	if *updateDocs {
		if err := os.WriteFile(docsCopy, api.OpenAPI, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	onDisk, err := os.ReadFile(docsCopy)
	if err != nil || !bytes.Equal(onDisk, api.OpenAPI) {
		t.Errorf("%s differs from server/api/openapi.yaml (%v): run go test ./server -run OpenAPI -update", docsCopy, err)
	}
	if !strings.Contains(string(api.OpenAPI), "version: "+Version) {
		t.Errorf("the document's info.version is not the server's %s", Version)
	}
}
