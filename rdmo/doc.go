// Package rdmo is the RDMO wire protocol and the handler SDK shared by
// workers, plugins and initiators.
package rdmo
