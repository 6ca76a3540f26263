package target_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/host/target"
	"github.com/openrdmo/rdmo/internal/testproc"
	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/ucp/ucptest"
	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/rdmoworker"
	"github.com/openrdmo/rdmo/urom/service"
	"github.com/openrdmo/rdmo/urom/uromtest"
)

// The test binary doubles as a UROM worker process (role "worker") and as
// an embedded UROM service (role "service", which takes --listen and
// --secret-file as `rdmo dpu` does).
func TestMain(m *testing.M) {
	switch testproc.Role() {
	case "worker":
		if err := service.ServeWorker(context.Background(), os.NewFile(service.ControlFD, "control"), rdmoworker.Factory, nil); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case "service":
		if err := serviceMain(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "service:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func serviceConfig(listen string, tr ucptest.Transport) service.Config {
	return service.Config{
		Listen:           listen,
		Builtins:         rdmoworker.Builtins(),
		MaxWorkers:       4,
		WorkerCommand:    []string{os.Args[0]},
		WorkerEnv:        append([]string{testproc.RoleEnv + "=worker"}, tr.Env()...),
		ComponentVersion: command.ComponentVersion,
	}
}

// serviceMain is a UROM service as `rdmo dpu` runs it, over shared memory,
// until SIGTERM.
func serviceMain(args []string) error {
	fs := flag.NewFlagSet("service", flag.ContinueOnError)
	listen := fs.String("listen", "", "")
	secretFile := fs.String("secret-file", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	secret, err := os.ReadFile(*secretFile)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	cfg := serviceConfig(*listen, ucptest.Transports[0])
	cfg.Secret = bytes.TrimSpace(secret)
	svc, err := service.New(ctx, cfg)
	if err != nil {
		return err
	}
	addr, err := svc.Listen()
	if err != nil {
		return err
	}
	urom.Announce(os.Stdout, addr)
	return svc.Serve(ctx)
}

// startService runs a UROM service in this process.
func startService(t *testing.T, tr ucptest.Transport) string {
	t.Helper()
	return uromtest.Start(t, serviceConfig("127.0.0.1:0", tr))
}

func newLocal(t *testing.T, tr ucptest.Transport) *target.Local {
	t.Helper()
	local, err := target.NewLocal(target.LocalOptions{Config: tr.Config()})
	if err != nil {
		ucptest.SkipOrFail(t, "UCX unavailable: %v", err)
	}
	return local
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// The whole flow through the library, with a real initiator: a worker
// from a dialed service, CLIENT_INIT, MR_REG of a queue, RQ_CREATE, an
// append that lands in the target's memory, then the ordered teardown.
func TestTargetFlow(t *testing.T) {
	for _, tr := range ucptest.Transports {
		t.Run(tr.Name, func(t *testing.T) {
			ctx := ctxFor(t)
			addr := startService(t, tr)
			local := newLocal(t, tr)
			mem, err := local.Allocate(4096)
			if err != nil {
				t.Fatal(err)
			}
			binary.LittleEndian.PutUint64(mem.Bytes(), mem.Address()+8) // the tail
			local.Start()
			defer func() {
				if err := local.Close(); err != nil {
					t.Errorf("local close: %v", err)
				}
			}()

			tg, err := target.New(ctx, target.Options{
				ServiceAddress: addr,
				Env:            tr.Env(),
				AppendStrategy: "owned",
				ClientID:       7,
				Address:        local.Address(),
			})
			if err != nil {
				t.Fatal(err)
			}
			if tg.ClientID() != 7 || len(tg.WorkerAddress()) == 0 || tg.WorkerPID() == 0 || tg.Err() != nil {
				t.Fatalf("client %d, worker address %d bytes, pid %d, err %v", tg.ClientID(), len(tg.WorkerAddress()), tg.WorkerPID(), tg.Err())
			}
			// The worker's extensions reach the target at CLIENT_INIT,
			// through the service, for the initiators' options.
			if caps := tg.WorkerCapabilities(); !slices.Equal(caps, dpu.Capabilities()) || !initiator.AckGroupSupported(caps) {
				t.Fatalf("worker capabilities %v, want %v", caps, dpu.Capabilities())
			}
			reg, err := tg.Register(ctx, mem)
			if err != nil {
				t.Fatal(err)
			}
			if reg.ID == 0 || reg.Base != mem.Address() || reg.Len != 4096 || len(reg.Rkey) == 0 {
				t.Fatalf("region %+v", reg)
			}

			in, err := initiator.New(initiator.Options{WorkerAddress: tg.WorkerAddress(), ClientID: tg.ClientID(), UCX: tr.Config()})
			if err != nil {
				t.Fatal(err)
			}
			rq, err := tg.CreateRQ(ctx, in.Address())
			if err != nil {
				in.Close()
				t.Fatal(err)
			}
			data := bytes.Repeat([]byte{0x5a}, 16)
			if err := in.Append(reg.Base, reg.ID, reg.ID, data); err != nil {
				t.Fatal(err)
			}
			if _, err := in.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := tg.DestroyRQ(ctx, rq); err != nil {
				t.Errorf("RQ_DESTROY: %v", err)
			}
			if err := in.Close(); err != nil {
				t.Errorf("initiator close: %v", err)
			}
			// MR_DEREG writes back the tail the owned strategy caches.
			if err := tg.Deregister(ctx, reg.ID); err != nil {
				t.Fatal(err)
			}
			b := mem.Bytes()
			if tail := binary.LittleEndian.Uint64(b); tail != mem.Address()+8+16 || !bytes.Equal(b[8:24], data) {
				t.Errorf("tail %#x (base %#x), data % x", tail, mem.Address(), b[8:24])
			}
			if err := tg.Close(); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(tg.Err(), target.ErrClosed) {
				t.Errorf("Err after Close: %v", tg.Err())
			}
			if _, err := tg.Register(ctx, mem); !errors.Is(err, target.ErrClosed) {
				t.Errorf("Register after Close: %v, want ErrClosed", err)
			}
			if err := tg.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		})
	}
}

// Close undoes what the target left: request queues and regions, then
// the worker; several targets share one Service.
func TestCloseUndoesAndSharesService(t *testing.T) {
	tr := ucptest.Transports[0]
	ctx := ctxFor(t)
	svc, err := target.Dial(ctx, startService(t, tr), target.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	local := newLocal(t, tr)
	mem, err := local.Allocate(8192)
	if err != nil {
		t.Fatal(err)
	}
	local.Start()
	defer local.Close()

	var tgs []*target.Target
	for range 2 {
		tg, err := target.New(ctx, target.Options{Service: svc, Env: tr.Env(), Address: local.Address()})
		if err != nil {
			t.Fatal(err)
		}
		tgs = append(tgs, tg)
		if _, err := tg.Register(ctx, mem); err != nil {
			t.Fatal(err)
		}
		peer := newLocal(t, tr)
		peer.Start()
		defer peer.Close()
		if _, err := tg.CreateRQ(ctx, peer.Address()); err != nil {
			t.Fatal(err)
		}
	}
	if tgs[0].WorkerPID() == tgs[1].WorkerPID() {
		t.Fatal("two targets share one worker")
	}
	for _, tg := range tgs {
		if err := tg.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}
	// The session outlives its targets.
	tg, err := target.New(ctx, target.Options{Service: svc, Env: tr.Env(), Address: local.Address()})
	if err != nil {
		t.Fatalf("a new target after the others closed: %v", err)
	}
	if err := tg.Close(); err != nil {
		t.Error(err)
	}
}

// A worker that dies ends the target: Done closes, Err says why, and
// commands fail fast with it; Close still succeeds.
func TestWorkerDeath(t *testing.T) {
	tr := ucptest.Transports[0]
	ctx := ctxFor(t)
	local := newLocal(t, tr)
	local.Start()
	defer local.Close()
	tg, err := target.New(ctx, target.Options{ServiceAddress: startService(t, tr), Env: tr.Env(), Address: local.Address()})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(tg.WorkerPID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tg.Done():
	case <-ctx.Done():
		t.Fatal("Done not closed after the worker died")
	}
	var died *target.WorkerDiedError
	if !errors.As(tg.Err(), &died) || !errors.Is(tg.Err(), urom.ErrWorkerDied) {
		t.Errorf("Err %v, want a WorkerDiedError", tg.Err())
	}
	_, err = tg.CreateRQ(ctx, local.Address())
	var ce *target.CommandError
	if !errors.As(err, &ce) || ce.Command != dpu.CmdRQCreate || !errors.As(err, &died) {
		t.Errorf("RQ_CREATE after the death: %v", err)
	}
	if err := tg.Close(); err != nil {
		t.Errorf("close after the death: %v", err)
	}
}

// An embedded service: started as a child process with a secret of the
// run on a pipe, a worker spawned on it, stopped by Close. A host without
// the secret is refused.
func TestEmbedded(t *testing.T) {
	tr := ucptest.Transports[0]
	ctx := ctxFor(t)
	local := newLocal(t, tr)
	local.Start()
	defer local.Close()
	tg, err := target.New(ctx, target.Options{
		Embedded: target.EmbeddedOptions{Command: []string{os.Args[0]}, Env: []string{testproc.RoleEnv + "=service"}},
		Env:      tr.Env(),
		Address:  local.Address(),
	})
	if err != nil {
		t.Fatal(err)
	}
	svc := tg.Service()
	if !svc.Embedded() || svc.PID() == 0 {
		t.Fatalf("service embedded %v, pid %d", svc.Embedded(), svc.PID())
	}
	if _, err := target.Dial(ctx, svc.Addr(), target.DialOptions{}); !errors.Is(err, urom.ErrAuth) {
		t.Errorf("dial without the run's secret: %v, want urom.ErrAuth", err)
	}
	exited := svc.Exited()
	if err := tg.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-ctx.Done():
		t.Fatal("the embedded service still runs after Close")
	}
}

// A service that is not there: a ServiceError naming the address.
func TestDialError(t *testing.T) {
	ctx := ctxFor(t)
	_, err := target.New(ctx, target.Options{ServiceAddress: "127.0.0.1:1", Address: []byte{1}})
	var se *target.ServiceError
	if !errors.As(err, &se) || se.Addr != "127.0.0.1:1" || se.Embedded {
		t.Errorf("err %v, want a ServiceError for 127.0.0.1:1", err)
	}
	if _, err := target.New(ctx, target.Options{}); err == nil {
		t.Error("no Address accepted")
	}
}
