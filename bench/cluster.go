package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/storybus/storybus/bus/store"
)

// localCluster is Options.Cluster's NATS cluster: nats-server processes
// clustered with JetStream on loopback, each with a store directory of its
// own under one temporary directory, stopped and removed by stop.
type localCluster struct {
	dir   string
	nodes []*localNode
	urls  []string
}

type localNode struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	// monitor is the host:port of its monitoring endpoints (/healthz).
	monitor string
	logs    *tailBuffer
}

// clusterReadyWithin bounds how long the cluster's nodes take to be
// healthy and elect a JetStream meta leader.
const clusterReadyWithin = time.Minute

// startCluster starts o.Cluster nats-server processes of o.NATSServer,
// fsyncing as o.Sync says, and returns once every node is healthy and
// JetStream answers. Their ports are picked free just before: a node that
// finds one taken by then has the cluster started again on other ports.
func startCluster(ctx context.Context, o Options) (*localCluster, error) {
	const attempts = 3
	for attempt := 1; ; attempt++ {
		c, err := startClusterOnce(ctx, o)
		if err == nil || attempt == attempts || !strings.Contains(err.Error(), "address already in use") {
			return c, err
		}
	}
}

// startClusterOnce is one attempt of startCluster.
func startClusterOnce(ctx context.Context, o Options) (_ *localCluster, err error) {
	bin, err := exec.LookPath(o.NATSServer)
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w (give its path with --nats-server)", err)
	}
	c := &localCluster{}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	if c.dir, err = os.MkdirTemp(o.DataDir, "storybus-bench-cluster-"); err != nil {
		return nil, err
	}
	conf := "jetstream { sync_interval: always }\n"
	if o.Sync == SyncInterval {
		conf = ""
		if o.SyncInterval > 0 {
			conf = fmt.Sprintf("jetstream { sync_interval: %q }\n", o.SyncInterval.String())
		}
	}
	type ports struct{ client, route, monitor string }
	var all []ports
	var routes []string
	for range o.Cluster {
		var p ports
		for _, addr := range []*string{&p.client, &p.route, &p.monitor} {
			if *addr, err = pickAddr(); err != nil {
				return nil, err
			}
		}
		all = append(all, p)
		routes = append(routes, "nats://"+p.route)
	}
	for i, p := range all {
		name := fmt.Sprintf("n%d", i)
		dir := filepath.Join(c.dir, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, err
		}
		host, port, _ := net.SplitHostPort(p.client)
		_, mport, _ := net.SplitHostPort(p.monitor)
		args := []string{"-js", "-sd", dir, "-a", host, "-p", port, "-m", mport, "-n", name,
			"--cluster_name", "storybus-bench", "--cluster", "nats://" + p.route, "--routes", strings.Join(routes, ",")}
		if conf != "" {
			file := filepath.Join(dir, "nats-server.conf")
			if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
				return nil, err
			}
			args = append(args, "-c", file)
		}
		node := &localNode{name: name, monitor: p.monitor, logs: &tailBuffer{}, done: make(chan struct{})}
		node.cmd = exec.Command(bin, args...)
		node.cmd.Stdout, node.cmd.Stderr = node.logs, node.logs
		if err := node.cmd.Start(); err != nil {
			return nil, fmt.Errorf("start nats-server %s: %w", name, err)
		}
		go func() { _ = node.cmd.Wait(); close(node.done) }()
		c.nodes = append(c.nodes, node)
		c.urls = append(c.urls, "nats://"+p.client)
	}
	if err := c.waitReady(ctx, o); err != nil {
		return nil, err
	}
	return c, nil
}

// url is every node's client URL, comma-separated, as --nats-url takes it.
func (c *localCluster) url() string { return strings.Join(c.urls, ",") }

// waitReady waits until every node's /healthz answers 200 and JetStream
// answers with a meta leader.
func (c *localCluster) waitReady(ctx context.Context, o Options) error {
	ctx, cancel := context.WithTimeout(ctx, clusterReadyWithin)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	// A node that lost its port to another process exits at once, while
	// its peers wait for it without a meta leader: an exit is final, and
	// the caller starts the cluster again on other ports.
	exited := func() error {
		for _, node := range c.nodes {
			select {
			case <-node.done:
				return fmt.Errorf("nats-server %s exited: %s", node.name, node.logs.String())
			default:
			}
		}
		return nil
	}
	ready := func() error {
		for _, node := range c.nodes {
			res, err := hc.Get("http://" + node.monitor + "/healthz")
			if err != nil {
				return fmt.Errorf("nats-server %s: %w", node.name, err)
			}
			body, _ := io.ReadAll(io.LimitReader(res.Body, 512))
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				return fmt.Errorf("nats-server %s /healthz %d: %s", node.name, res.StatusCode, body)
			}
		}
		st, err := store.Connect(store.Options{URL: c.url(), Replicas: o.replicas(), Name: "storybus-bench-probe"})
		if err != nil {
			return err
		}
		defer st.Close()
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		defer pcancel()
		return st.Ping(pctx)
	}
	for {
		if err := exited(); err != nil {
			return err
		}
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the local NATS cluster was not ready within %s: %w", clusterReadyWithin, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stop stops every node (SIGTERM, then SIGKILL after 10 s) and removes
// their directories.
func (c *localCluster) stop() {
	for _, node := range c.nodes {
		_ = node.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, node := range c.nodes {
		select {
		case <-node.done:
		case <-time.After(10 * time.Second):
			_ = node.cmd.Process.Kill()
			<-node.done
		}
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

// pickAddr picks each node's ports; a test replaces it to hand out a
// port that is taken.
var pickAddr = freeAddr

// freeAddr returns a loopback host:port free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// tailBuffer keeps the last tailBytes a process wrote, to say why it
// exited.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 4096

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - tailBytes; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
