// Package interop checks rdmo against the reference (NVIDIA DOCA 3.0's
// urom_rdmo) from outside: a C initiator written in this repository the
// way the reference client is written (testdata/doca_client.c, built with
// cc and pkg-config ucx) runs the reference demo against `rdmo -m server`,
// and so does `rdmo -m client --oob-protocol doca`, over TCP and over
// shared memory. It holds tests only; see docs/PROTOCOL.md, "The reference
// out-of-band exchange".
package interop
