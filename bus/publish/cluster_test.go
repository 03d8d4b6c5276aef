package publish_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/store"
)

// TestOnExternalCluster runs the publish core's scenarios against three
// separately started nats-server processes clustered on loopback, with
// every stream and bucket at three replicas: the scale-out path, selected
// by configuration (a URL) with no code change.
func TestOnExternalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster")
	}
	bin := buildNATSServer(t)
	urls := startCluster(t, bin, 3)
	external = &externalCluster{url: strings.Join(urls, ","), replicas: 3}
	defer func() { external = nil }()
	for name, scenario := range map[string]func(*testing.T){
		"new message":                TestNewMessageIsPublishedOnce,
		"duplicate":                  TestSameContentIsDuplicate,
		"reused id":                  TestOtherContentUnderSameIDIsReused,
		"recorded but unpublished":   TestRecordedButUnpublished,
		"superseded":                 TestSupersededSnapshotIsNotPublished,
		"concurrent retries":         TestConcurrentRetriesPublishOnce,
		"contention":                 TestNewerSnapshotDuringRepublicationIsContention,
		"publish failure":            TestPublishFailureRemovesRecord,
		"lost mark":                  TestLostMarkOfAnEvent,
		"snapshot proof":             TestSnapshotRecordsAreProvedByTheStorySubject,
		"snapshot order":             TestSnapshotOrder,
		"head after restart":         TestHeadIsReadFromTheStoreAfterRestart,
		"stopped after publish":      TestStoppedAfterPublish,
		"publish and removal failed": TestPublishAndRemovalFailureLeavesLease,
		"resend after a stale view":  TestResendAfterAStaleView,
	} {
		t.Run(name, scenario)
	}
	// The streams really are replicated.
	st, err := store.Connect(store.Options{URL: external.url, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ws, err := st.OpenWorkspace(context.Background(), "ws1", 7*24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	info, err := ws.Stream.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("topic stream not replicated: %+v", info.Cluster)
	}
	// On a cluster a record is replicated before it is acknowledged: no
	// asynchronous persistence, nothing for a bus process to rebuild.
	records, err := st.JS.Stream(context.Background(), "KV_"+store.RecordsBucket("ws1"))
	if err != nil {
		t.Fatal(err)
	}
	if pm := records.CachedInfo().Config.PersistMode; pm != jetstream.DefaultPersistMode || ws.RecordsLossWindow != 0 {
		t.Fatalf("records bucket on the cluster: persist mode %v, loss window %v; want default and 0", pm, ws.RecordsLossWindow)
	}
}

// buildNATSServer builds the nats-server the module requires into bin/
// (git-ignored), once.
func buildNATSServer(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
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

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// startCluster starts n clustered JetStream servers and waits until
// JetStream answers with a meta leader.
func startCluster(t *testing.T, bin string, n int) []string {
	t.Helper()
	client, cluster := freePorts(t, n), freePorts(t, n)
	var routes []string
	for _, p := range cluster {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	var urls []string
	for i := range n {
		dir := t.TempDir()
		cmd := exec.Command(bin, "-js", "-sd", dir, "-a", "127.0.0.1", "-p", fmt.Sprint(client[i]),
			"-n", fmt.Sprintf("n%d", i), "--cluster_name", "storybus",
			"--cluster", routes[i], "--routes", strings.Join(routes, ","))
		var logs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() && os.Getenv("STORYBUS_TEST_LOGS") != "" {
				t.Logf("nats-server n%d:\n%s", i, logs.String())
			}
		})
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", client[i]))
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := store.Connect(store.Options{URL: strings.Join(urls, ","), Replicas: 3})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err = st.Ping(ctx)
			cancel()
			st.Close()
			if err == nil {
				return urls
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ready: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
