package server

import (
	"os"
	"testing"

	"github.com/gin-gonic/gin"
)

// TestMain puts gin in test mode, as a program serving Handler puts it in
// release mode: debug mode would log every route of every test server.
func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}
