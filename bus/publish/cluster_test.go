package publish_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
)

// TestOnExternalCluster runs the publish core's scenarios against three
// separately started nats-server processes clustered on loopback, with
// every stream and bucket at three replicas: the scale-out path, selected
// by configuration (a URL) with no code change.
func TestOnExternalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster")
	}
	cluster := storetest.StartCluster(t, storetest.NATSServer(t, "../.."), 3)
	external = &externalCluster{url: cluster.URL(), replicas: 3}
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
		"full topic":                 TestFullTopicRefusesAndKeepsWhatItAccepted,
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
