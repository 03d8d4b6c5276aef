package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/testutil"
)

// NATSServer builds the nats-server that go.mod requires into the
// repository's bin/ (git-ignored; the build cache makes it cheap after
// the first time) and returns its path. root is the repository's root,
// relative to the test's package directory.
func NATSServer(t testing.TB, root string) string {
	t.Helper()
	root, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin", "nats-server")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	return bin
}

// Cluster is nats-server processes clustered with JetStream on loopback,
// each with its own store directory and ports, which a test can stop and
// start again (on the same directory and ports) to lose a node. The
// processes are killed when the test ends.
type Cluster struct {
	t     testing.TB
	bin   string
	nodes []*clusterNode
}

type clusterNode struct {
	name string
	// syncAlways makes the node fsync every write (SyncAlways).
	syncAlways bool

	dir     string
	client  string // host:port of NATS clients
	route   string // host:port of the other nodes' routes
	monitor string // host:port of the monitoring endpoints (/healthz)
	routes  string // every node's route URL, comma-separated
	cmd     *exec.Cmd
	done    chan struct{}
	logs    *testutil.SyncBuffer
}

// A ClusterOption changes how StartCluster starts its nodes.
type ClusterOption func(*Cluster)

// SyncAlways makes node i fsync every write (nats-server's
// `sync_interval: always`), where the others leave their writes to the
// operating system: a replica on a slow disk, which applies the writes its
// leaders acknowledged behind the other replicas.
func SyncAlways(i int) ClusterOption {
	return func(c *Cluster) { c.nodes[i].syncAlways = true }
}

// StartCluster starts n clustered JetStream servers of the nats-server
// binary bin, named n0, n1 and so on, and returns once JetStream answers
// with a meta leader. The ports are picked free just before; a node that
// finds one of its ports taken by then (another process bound it in
// between) has the whole cluster started again on fresh ports.
func StartCluster(t testing.TB, bin string, n int, opts ...ClusterOption) *Cluster {
	t.Helper()
	c := &Cluster{t: t, bin: bin}
	// The test's first TempDir registers the removal of its directories,
	// and cleanups run last first: made before the nodes' cleanup, the
	// directories are removed after the nodes are killed, not while a
	// node still writes into its store.
	_ = t.TempDir()
	t.Cleanup(func() {
		c.kill()
		if t.Failed() && os.Getenv("STORYBUS_TEST_LOGS") != "" {
			for _, node := range c.nodes {
				t.Logf("nats-server %s:\n%s", node.name, node.logs.String())
			}
		}
	})
	const attempts = 3
	for attempt := 1; ; attempt++ {
		c.nodes = newNodes(t, n)
		for _, opt := range opts {
			opt(c)
		}
		for i := range c.nodes {
			c.start(i)
		}
		err := c.waitStarted(60 * time.Second)
		if err == nil {
			break
		}
		if !errors.Is(err, errPortTaken) || attempt == attempts {
			t.Fatal(err)
		}
		t.Logf("nats cluster, attempt %d of %d: %v; starting it again on other ports", attempt, attempts, err)
		c.kill()
	}
	c.WaitReady(60 * time.Second)
	return c
}

// pickAddr picks the nodes' ports; a test makes it pick a taken one.
var pickAddr = freeAddr

// freeAddr is testutil.FreeAddr.
var freeAddr = testutil.FreeAddr

// newNodes are n nodes with their own directories and free ports, each
// routing to every other.
func newNodes(t testing.TB, n int) []*clusterNode {
	nodes := make([]*clusterNode, 0, n)
	var routes []string
	for i := range n {
		node := &clusterNode{name: fmt.Sprintf("n%d", i), dir: t.TempDir(),
			client: pickAddr(t), route: pickAddr(t), monitor: pickAddr(t)}
		routes = append(routes, "nats://"+node.route)
		nodes = append(nodes, node)
	}
	for _, node := range nodes {
		node.routes = strings.Join(routes, ",")
	}
	return nodes
}

// kill kills every running node and waits until it has exited.
func (c *Cluster) kill() {
	for _, node := range c.nodes {
		if node.cmd != nil {
			_ = node.cmd.Process.Kill()
			<-node.done
			node.cmd = nil
		}
	}
}

// errPortTaken is a node's exit because one of its ports was taken.
var errPortTaken = errors.New("a port was taken")

// waitStarted waits until every node answers /healthz, and says whether
// one that exited meanwhile found a port taken. Every node's exit is
// watched while any is polled: a node waits for its peers, so one that
// never started leaves the others unhealthy, and the cause is the one
// that exited.
func (c *Cluster) waitStarted(within time.Duration) error {
	deadline := time.Now().Add(within)
	hc := &http.Client{Timeout: 2 * time.Second}
	healthy := make([]bool, len(c.nodes))
	for {
		for _, node := range c.nodes {
			select {
			case <-node.done:
				logs := node.logs.String()
				if strings.Contains(logs, "address already in use") {
					return fmt.Errorf("nats-server %s: %w:\n%s", node.name, errPortTaken, logs)
				}
				return fmt.Errorf("nats-server %s exited:\n%s", node.name, logs)
			default:
			}
		}
		var lastErr error
		all := true
		for i, node := range c.nodes {
			if healthy[i] {
				continue
			}
			res, err := hc.Get("http://" + node.monitor + "/healthz")
			if err == nil {
				res.Body.Close()
				healthy[i] = res.StatusCode == http.StatusOK
				if !healthy[i] {
					err = fmt.Errorf("nats-server %s: /healthz %s", node.name, res.Status)
				}
			}
			if !healthy[i] {
				all, lastErr = false, err
			}
		}
		if all {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats cluster not healthy after %s: %v", within, lastErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) start(i int) {
	c.t.Helper()
	node := c.nodes[i]
	host, port, _ := net.SplitHostPort(node.client)
	_, mport, _ := net.SplitHostPort(node.monitor)
	args := []string{"-js", "-sd", node.dir, "-a", host, "-p", port, "-m", mport,
		"-n", node.name, "--cluster_name", "storybus",
		"--cluster", "nats://" + node.route, "--routes", node.routes}
	if node.syncAlways {
		conf := filepath.Join(node.dir, "sync-always.conf")
		if err := os.WriteFile(conf, []byte("jetstream { sync_interval: always }\n"), 0o600); err != nil {
			c.t.Fatal(err)
		}
		args = append(args, "-c", conf)
	}
	cmd := exec.Command(c.bin, args...)
	if node.logs == nil {
		node.logs = &testutil.SyncBuffer{}
	}
	cmd.Stdout, cmd.Stderr = node.logs, node.logs
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	node.cmd, node.done = cmd, make(chan struct{})
	done := node.done
	go func() { _ = cmd.Wait(); close(done) }()
}

// URLs are the nodes' client URLs.
func (c *Cluster) URLs() []string {
	var urls []string
	for _, node := range c.nodes {
		urls = append(urls, "nats://"+node.client)
	}
	return urls
}

// PIDs are the process ids of the nodes running, in node order.
func (c *Cluster) PIDs() []int {
	var out []int
	for _, node := range c.nodes {
		if node.cmd != nil && node.cmd.Process != nil {
			out = append(out, node.cmd.Process.Pid)
		}
	}
	return out
}

// URL is every node's client URL, comma-separated, as --nats-url takes it.
func (c *Cluster) URL() string { return strings.Join(c.URLs(), ",") }

// Stop stops node i with sig and waits until it has exited: SIGTERM is
// nats-server's graceful stop, which hands the node's leaderships over
// first; SIGKILL loses the node at once.
func (c *Cluster) Stop(i int, sig syscall.Signal) {
	c.t.Helper()
	node := c.nodes[i]
	if node.cmd == nil {
		return
	}
	_ = node.cmd.Process.Signal(sig)
	select {
	case <-node.done:
	case <-time.After(60 * time.Second):
		c.t.Fatalf("nats-server %s did not stop within 60s of %v", node.name, sig)
	}
	node.cmd = nil
}

// Freeze stops node i's process (SIGSTOP) and waits until it is stopped,
// where the system says so (Linux's /proc): a hung server, or one whose
// host or network is lost, which reads nothing more from its sockets and
// closes none of them. Thaw resumes it.
func (c *Cluster) Freeze(i int) {
	c.t.Helper()
	node := c.nodes[i]
	if node.cmd == nil {
		return
	}
	if err := node.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatal(err)
	}
	pid := node.cmd.Process.Pid
	testutil.Eventually(c.t, "nats-server "+node.name+" stopped", 10*time.Second, func() error {
		st, err := testutil.ProcStat(pid)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // no /proc to ask
		}
		if err != nil {
			return err
		}
		if st.State != 'T' {
			return fmt.Errorf("state %c, not stopped", st.State)
		}
		return nil
	})
}

// Thaw resumes node i after Freeze (SIGCONT).
func (c *Cluster) Thaw(i int) {
	c.t.Helper()
	if node := c.nodes[i]; node.cmd != nil {
		if err := node.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			c.t.Fatal(err)
		}
	}
}

// Start starts node i again after Stop, on its directory and ports, and
// returns once its JetStream is current with the cluster (its /healthz
// answers 200).
func (c *Cluster) Start(i int) {
	c.t.Helper()
	c.start(i)
	c.waitHealthy(i, 2*time.Minute)
}

// WaitReady waits until every running node is healthy and JetStream
// answers with a meta leader.
func (c *Cluster) WaitReady(within time.Duration) {
	c.t.Helper()
	for i, node := range c.nodes {
		if node.cmd != nil {
			c.waitHealthy(i, within)
		}
	}
	testutil.Eventually(c.t, "the NATS cluster's JetStream answers", within, func() error {
		st, err := store.Connect(store.Options{URL: c.URL(), Replicas: len(c.nodes)})
		if err != nil {
			return err
		}
		defer st.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return st.Ping(ctx)
	})
}

func (c *Cluster) waitHealthy(i int, within time.Duration) {
	c.t.Helper()
	node := c.nodes[i]
	hc := &http.Client{Timeout: 2 * time.Second}
	testutil.Eventually(c.t, "nats-server "+node.name+" healthy", within, func() error {
		select {
		case <-node.done:
			c.t.Fatalf("nats-server %s exited:\n%s", node.name, node.logs.String())
		default:
		}
		res, err := hc.Get("http://" + node.monitor + "/healthz?details=true")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(res.Body, 2048))
			return fmt.Errorf("/healthz %d: %s", res.StatusCode, body)
		}
		return nil
	})
}
