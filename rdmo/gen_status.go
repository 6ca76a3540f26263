//go:build ignore

// gen_status writes docs/ERRORS.md from the status catalogue in status.go.
// Run it with "go generate ./rdmo"; TestErrorsDocUpToDate fails when the
// committed file differs from what this would write.
package main

import (
	"flag"
	"log"
	"os"

	"github.com/openrdmo/rdmo/rdmo/internal/genstatus"
)

func main() {
	out := flag.String("o", "../docs/ERRORS.md", "output file")
	flag.Parse()
	if err := os.WriteFile(*out, genstatus.Markdown(), 0o644); err != nil {
		log.Fatal(err)
	}
}
