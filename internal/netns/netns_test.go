package netns_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/internal/netns"
	"github.com/openrdmo/rdmo/ucp"
)

// The child roles run inside a namespace: "server" maps memory and prints
// its address and rkey; "client" writes into it over UCX and reads it back.
func TestMain(m *testing.M) {
	switch os.Getenv("NETNS_TEST_ROLE") {
	case "server":
		os.Exit(server())
	case "client":
		os.Exit(client())
	}
	os.Exit(m.Run())
}

func server() int {
	ctx, err := ucp.NewContext(ucp.ContextOptions{})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	w, _ := ctx.NewWorker(ucp.WorkerOptions{})
	mem, _ := ctx.Allocate(4096)
	addr, _ := w.Address()
	rk, _ := mem.PackRkey()
	fmt.Printf("READY %x %x %d\n", addr, rk, mem.Address())
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		w.Progress()
		if bytes.HasPrefix(mem.Bytes(), []byte("across")) {
			fmt.Println("GOT", string(mem.Bytes()[:16]))
			for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
				w.Progress()
			}
			return 0
		}
	}
	return 1
}

func client() int {
	ctx, err := ucp.NewContext(ucp.ContextOptions{})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	w, _ := ctx.NewWorker(ucp.WorkerOptions{})
	f := strings.Fields(os.Getenv("NETNS_SERVER"))
	addr, _ := hex.DecodeString(f[0])
	rk, _ := hex.DecodeString(f[1])
	var base uint64
	fmt.Sscan(f[2], &base)
	ep, err := w.Connect(addr, ucp.EndpointOptions{})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	rkey, err := ep.UnpackRkey(rk)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	if err := ep.PutSync([]byte("across-the-wire!"), base, rkey, 10*time.Second); err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	ep.FlushSync(10 * time.Second)
	fmt.Println("DONE", ep.Transports())
	return 0
}

func TestUCXAcrossNamespaces(t *testing.T) {
	p := netns.New(t)
	srv := p.A.Command(os.Args[0], "-test.run=^$")
	srv.Env = append(append(os.Environ(), "NETNS_TEST_ROLE=server"), p.A.UCXEnv()...)
	out, _ := srv.StdoutPipe()
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	sc := bufio.NewScanner(out)
	var ready string
	for sc.Scan() {
		if l, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
			ready = l
			break
		}
	}
	if ready == "" {
		t.Fatal("server did not start")
	}
	cl := p.B.Command(os.Args[0], "-test.run=^$")
	cl.Env = append(append(os.Environ(), "NETNS_TEST_ROLE=client", "NETNS_SERVER="+ready), p.B.UCXEnv()...)
	res, err := cl.CombinedOutput()
	if err != nil || !strings.Contains(string(res), "DONE [tcp]") {
		t.Fatalf("client: %v\n%s", err, res)
	}
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "GOT across-the-wire!") {
		t.Fatalf("server did not see the write: %q", sc.Text())
	}
	srv.Wait()
}
