// Package stratago holds strata's franz-go test suite (the tests are in the *_test.go
// files); this file starts and stops the `strata agent` process they talk to.
//
// Environment:
//
//	STRATA_BIN            path of the strata binary (default <repo>/target/debug/strata)
//	STRATA_READY_TIMEOUT  seconds to wait for /readyz (default 30)
//	STRATA_KEEP_DATA=1    keep the temp dir (data dir and log) even when the test passed
//	STRATA_LOG            passed through to the broker (its tracing filter)
//
// Other STRATA_* variables are not passed to the broker.
package stratago

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BinPath is the strata binary the tests run: $STRATA_BIN, or target/debug/strata of
// the repository this directory is in.
func BinPath() string {
	if p := os.Getenv("STRATA_BIN"); p != "" {
		return p
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return filepath.Join("..", "..", "target", "debug", "strata")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "target", "debug", "strata")
}

func readyTimeout() time.Duration {
	if s := os.Getenv("STRATA_READY_TIMEOUT"); s != "" {
		if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 {
			return time.Duration(f * float64(time.Second))
		}
	}
	return 30 * time.Second
}

// Broker is one `strata agent` process on loopback ports picked at creation, with its
// own data dir; it can be killed and restarted on the same dir and ports.
type Broker struct {
	Bin       string
	Root      string // temp dir holding DataDir and LogPath
	DataDir   string
	LogPath   string
	KafkaPort int
	HTTPPort  int
	ExtraArgs []string // appended to the command line on every (re)start

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when the current process has exited
	starts int
	exits  []string
}

// NewBroker makes a broker (not started); t.Cleanup kills it and removes its temp dir
// unless the test failed or STRATA_KEEP_DATA=1, in which case the dir is kept and the
// tail of the broker's log is written to the test log.
func NewBroker(t testing.TB, extraArgs ...string) *Broker {
	t.Helper()
	root, err := os.MkdirTemp("", "strata-go-test-")
	if err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	b := &Broker{
		Bin:       BinPath(),
		Root:      root,
		DataDir:   filepath.Join(root, "data"),
		LogPath:   filepath.Join(root, "strata.log"),
		KafkaPort: ports[0],
		HTTPPort:  ports[1],
		ExtraArgs: extraArgs,
	}
	if err := os.MkdirAll(b.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Kill()
		if t.Failed() || os.Getenv("STRATA_KEEP_DATA") == "1" {
			t.Logf("[strata] kept data dir and log: %s; %d starts, exits %v\n%s", root, b.Starts(), b.Exits(), b.LogTail(32*1024))
			return
		}
		os.RemoveAll(root)
	})
	return b
}

// StartBroker is NewBroker followed by Start; the test fails at once if it does not start.
func StartBroker(t testing.TB, extraArgs ...string) *Broker {
	t.Helper()
	b := NewBroker(t, extraArgs...)
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	return b
}

// Addr is the Kafka bootstrap address.
func (b *Broker) Addr() string { return fmt.Sprintf("127.0.0.1:%d", b.KafkaPort) }

// HTTPURL is the base URL of the agent's HTTP API.
func (b *Broker) HTTPURL() string { return fmt.Sprintf("http://127.0.0.1:%d", b.HTTPPort) }

// Starts is how many times the process was started.
func (b *Broker) Starts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.starts
}

// Exits lists how every process so far ended.
func (b *Broker) Exits() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.exits...)
}

func (b *Broker) command() []string {
	return append([]string{
		"agent",
		"--kafka-listen", b.Addr(),
		"--http-listen", fmt.Sprintf("127.0.0.1:%d", b.HTTPPort),
		"--data-dir", b.DataDir,
	}, b.ExtraArgs...)
}

// Running reports whether the process is alive.
func (b *Broker) Running() bool {
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Start starts (or restarts, on the same data dir and ports) the agent and waits for
// GET /readyz to answer 200 and the Kafka port to accept connections.
func (b *Broker) Start() error {
	if b.Running() {
		return errors.New("strata is already running")
	}
	if st, err := os.Stat(b.Bin); err != nil || st.IsDir() {
		return fmt.Errorf("strata binary not found at %s; build it (cargo build) or set STRATA_BIN", b.Bin)
	}
	log, err := os.OpenFile(b.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := b.command()
	b.mu.Lock()
	b.starts++
	n := b.starts
	b.mu.Unlock()
	fmt.Fprintf(log, "\n===== start #%d: %s %s\n", n, b.Bin, strings.Join(args, " "))

	cmd := exec.Command(b.Bin, args...)
	cmd.Stdin = nil
	cmd.Stdout = log
	cmd.Stderr = log
	// The agent reads STRATA_* variables (config file, node id, partitions...); keep
	// the caller's from leaking in, except the log filter.
	env := []string{}
	hasBacktrace := false
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "STRATA_") && !strings.HasPrefix(kv, "STRATA_LOG=") {
			continue
		}
		if strings.HasPrefix(kv, "RUST_BACKTRACE=") {
			hasBacktrace = true
		}
		env = append(env, kv)
	}
	if !hasBacktrace {
		env = append(env, "RUST_BACKTRACE=1")
	}
	cmd.Env = env
	// Own process group (a Ctrl-C of the test run reaches the test, which kills the
	// agent), and SIGKILL if the test binary dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := startOnSpawnerThread(cmd); err != nil {
		log.Close()
		return fmt.Errorf("starting strata: %w", err)
	}
	done := make(chan struct{})
	b.mu.Lock()
	b.cmd, b.done = cmd, done
	b.mu.Unlock()
	go func() {
		err := cmd.Wait()
		log.Close()
		b.mu.Lock()
		if err != nil {
			b.exits = append(b.exits, err.Error())
		} else {
			b.exits = append(b.exits, "exit status 0")
		}
		b.mu.Unlock()
		close(done)
	}()
	return b.waitReady(done, readyTimeout())
}

func (b *Broker) waitReady(done chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	last := "no attempt yet"
	for {
		select {
		case <-done:
			ex := b.Exits()
			return fmt.Errorf("strata exited (%s) before becoming ready\n%s", ex[len(ex)-1], b.LogTail(16*1024))
		default:
		}
		resp, err := client.Get(b.HTTPURL() + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				c, err := net.DialTimeout("tcp", b.Addr(), time.Second)
				if err == nil {
					c.Close()
					return nil
				}
				last = "kafka port: " + err.Error()
			} else {
				last = fmt.Sprintf("/readyz returned %d", resp.StatusCode)
			}
		} else {
			last = "/readyz: " + err.Error()
		}
		if time.Now().After(deadline) {
			b.Kill()
			return fmt.Errorf("strata not ready within %v (last: %s)\n%s", timeout, last, b.LogTail(16*1024))
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}

// Kill SIGKILLs the process (if running) and waits for it to be gone.
func (b *Broker) Kill() {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	if cmd == nil || done == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Kill()
	<-done
}

// Pdeathsig is delivered when the *thread* that started the child exits, and Go may
// end a thread (when a goroutine locked to it returns). Children are therefore
// started from one goroutine locked to its thread for the life of the test binary.
var spawnRequests = make(chan spawnRequest)

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked: this thread lives as long as the process
		for r := range spawnRequests {
			r.done <- r.cmd.Start()
		}
	}()
}

func startOnSpawnerThread(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	spawnRequests <- spawnRequest{cmd, done}
	return <-done
}

// LogTail is the last `limit` bytes of the broker's log.
func (b *Broker) LogTail(limit int) string {
	data, err := os.ReadFile(b.LogPath)
	if err != nil {
		return "<no strata log: " + err.Error() + ">"
	}
	prefix := ""
	if len(data) > limit {
		prefix = fmt.Sprintf("<... %d bytes cut ...>\n", len(data)-limit)
		data = data[len(data)-limit:]
	}
	return fmt.Sprintf("----- strata log (%s) -----\n%s%s", b.LogPath, prefix, bytes.TrimRight(data, "\n"))
}

// Ports are handed out from below the kernel's ephemeral range (32768 and up on
// Linux), so no outgoing connection can take one between picking and binding it,
// and never twice in one test binary. Each binary starts at its own offset.
const (
	portFloor = 20000
	portSpan  = 12000
)

var (
	portMu    sync.Mutex
	nextPort  = portFloor + (os.Getpid()*97)%portSpan
	handedOut = map[int]bool{}
)

// freePorts returns n distinct loopback TCP ports free now, each handed out once.
func freePorts(n int) ([]int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	var ports []int
	for tries := 0; tries < portSpan && len(ports) < n; tries++ {
		port := nextPort
		nextPort = portFloor + (nextPort-portFloor+1)%portSpan
		if handedOut[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		handedOut[port] = true
		ports = append(ports, port)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("no %d free loopback ports below %d", n, portFloor+portSpan)
	}
	return ports, nil
}
