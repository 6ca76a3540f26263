module github.com/openrdmo/rdmo

go 1.26
