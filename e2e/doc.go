// Package e2e holds the end-to-end tests of RDMO: a target, an RDMO worker
// and initiators exchanging real requests over UCX, with the results checked
// byte for byte in target memory.
package e2e
