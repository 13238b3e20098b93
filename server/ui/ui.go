// Package ui holds the web dashboard's files, embedded in the binary:
// the html/template pages (templates/) and the static assets (static/:
// the stylesheet, the dashboard's script and the vendored uPlot chart
// library with its licence). The handlers that render them live in the
// server package (server/ui_pages.go); the browser tests in e2e/.
//
// Nothing here is fetched from the internet at build or run time: `go
// build` alone puts the whole dashboard inside kairos-server.
package ui

import (
	"embed"
	"io/fs"
)

//go:embed templates/*.html
var templates embed.FS

//go:embed static
var static embed.FS

// Templates returns the page templates (templates/*.html at its root).
func Templates() fs.FS {
	sub, err := fs.Sub(templates, "templates")
	if err != nil {
		panic(err) // the embedded directory is always there
	}
	return sub
}

// Static returns the static assets (static/ at its root).
func Static() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err)
	}
	return sub
}
