// Package oob is the out-of-band channel between an RDMO target and an
// initiator (docs/ARCHITECTURE.md, "Setting up", steps 4 and 6): a TCP
// connection, one per peer, over which the target sends its worker's UCP
// address, its client id and the ids of its memory regions, the initiator
// sends its own UCP worker address,
// and, at the end, the initiator tells the target its work is complete and
// visible (Done) so the target never spins on its memory (docs/SECURITY.md
// section 6, defect 10), and the target answers with its verdict (Verified).
//
// The reference uses a plain socket on port 18515 with length-prefixed
// messages of at most 1024 bytes and no authentication; this package
// replaces it for rdmo's peers and also speaks it (RefConn, DialReference;
// Listener.AcceptEither serves both on one port, telling them apart from
// the first bytes with Detect: docs/PROTOCOL.md section 12).
//
// # Use
//
//	l, _ := oob.Listen(":18515", oob.Options{Secret: secret})  // target
//	c, _ := l.Accept(ctx)
//	c.Send(ctx, oob.WorkerInfo{WorkerAddress: addr, ClientID: id, Regions: regions})
//	ii, _ := oob.Expect[oob.InitiatorInfo](ctx, c)
//	done, _ := oob.Expect[oob.Done](waitCtx, c) // waitCtx: a deadline as long as the run
//	c.Send(ctx, oob.Verified{OK: true})
//
//	c, _ := oob.Dial(ctx, "target:18515", oob.Options{Secret: secret}) // initiator
//	wi, _ := oob.Expect[oob.WorkerInfo](ctx, c)
//	...
//
// # Wire format (version 1)
//
// Every message is one frame: a 12-byte prefix, then a msgpack body.
//
//	offset size field
//	0      4    magic "RDOB" (52 44 4F 42)
//	4      2    protocol version, u16 big endian (1)
//	6      2    message type, u16 big endian (table below)
//	8      4    body length in bytes, u32 big endian (≤ MaxBody; ≤ 1024 in the handshake)
//	12     n    body: one msgpack map, keys are the msgpack tags of the Go struct
//
// Magic and version keep their offsets in every future version, so peers of
// different versions report ErrVersion to each other. Bodies are maps,
// so a field can be added without breaking older peers (unknown keys are
// ignored, missing keys decode as zero). A body must be exactly one map, use
// no msgpack extension types and nest at most 16 deep; every length in it
// is checked against the bytes present before decoding, so decoding
// allocates at most a small multiple of the body size.
//
//	type  message        sent by              body keys
//	1     Hello          both, first          role (1 target, 2 initiator), version, auth (bool)
//	2     authChallenge  both, if auth        nonce (bin, 32 bytes)
//	3     authProof      dialer, then listener mac (bin, 32 bytes, HMAC-SHA256)
//	16    WorkerInfo     target               worker_address, client_id, regions [{id, base, len, name}], capabilities
//	17    InitiatorInfo  initiator            worker_address, name
//	18    Done           initiator            ops, bytes, errors, message
//	19    Verified       target               ok, detail
//	20    Barrier        either               id
//	21    Error          either               code, message
//
// Types 1–15 are the handshake and are refused afterwards; numbers are never
// reused.
//
// # Handshake
//
// Right after connecting, before anything else:
//
//  1. Both sides send Hello and read the peer's. A different version in the
//     peer's frame prefix is ErrVersion on both sides (each has sent
//     its hello before reading, so each sees the other's version); the same
//     role on both sides is ErrRole.
//  2. If exactly one side has a secret (Hello.auth), both fail with an
//     ErrAuth saying which side lacks it. If neither has one the
//     handshake is over (like the reference, no authentication).
//  3. Both send an authChallenge with a fresh random 32-byte nonce.
//  4. The dialer sends its authProof. The listener checks it; if wrong, it
//     sends Error{code 2} and closes; if right, it sends its own proof,
//     which the dialer checks. Each proof is
//     HMAC-SHA256(secret, "rdmo-oob v1 auth proof" || side ('D' or 'L') ||
//     role || u32 len || dialer's hello frame || u32 len || listener's hello
//     frame || dialer's nonce || listener's nonce), compared in constant
//     time. The side byte stops reflection of one side's proof as the
//     other's; the hellos in the transcript make tampering with version,
//     role or the auth flag fail the authentication.
//
// Only then are application messages exchanged, so a peer without the
// secret never receives a worker address, client id or region id. The
// whole handshake must finish within Options.Timeout.
//
// # Threat model
//
// The channel carries what grants memory access: a worker address and
// region ids let a peer that reaches the worker read and write the target's
// registered memory. The secret provides mutual authentication of the two
// peers and integrity of the handshake only. It does NOT provide
// confidentiality: every message, including WorkerInfo, crosses the network
// in clear text, and an eavesdropper learns the addresses and ids. Nor does
// it protect application messages after the handshake against an attacker
// who can modify traffic in flight. The secret is an HMAC key, not a
// password: a malicious listener can collect one dialer proof and try to
// guess a weak secret offline, so use at least 16 (better 32) random bytes.
// In production: set a secret on both sides, and keep the port on a trusted
// network or carry it over TLS, SSH port forwarding or WireGuard.
//
// Robustness against a faulty or hostile peer: every frame size is bounded
// (MaxBody, and 1 KiB before authentication); the length is checked before
// the body is read or allocated; every read and write has a deadline; and
// each failure is one typed error, ConnError, with a kind (see ErrPeerGone and
// the other sentinels) and IsPreAuth for those before authentication.
package oob
