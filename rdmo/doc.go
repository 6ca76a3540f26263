// Package rdmo is the handler SDK: what an RDMO operation handler implements
// (Handler), what it is given (Target, Request) and returns (Result, Status).
//
// The wire codec (header and response encoders and decoders, the BATCH
// container, layout constants) is the separate package rdmo/wire; a handler
// needs it only to decode a payload format of the reference (SCATTER iovs).
package rdmo
