package client

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Outbox keeps, on disk, the messages the client could not deliver: their
// retries were exhausted, or the credentials were refused, so the bus never
// judged them. Each is kept unchanged, byte for byte, until a resend
// delivers it (Client.Resend, or the next message of its story), and
// survives a restart of the process.
//
// Layout of the directory:
//
//	pending/<story>/<time>-<message_id>.msg   waiting for a resend, in story order
//	refused/<time>-<message_id>.msg           refused by the bus on a resend
//
// A .msg file is one line of JSON metadata followed by the message's bytes.
// Every file is written to a temporary name, synced and then linked into
// place, so a crash never leaves half an entry.
type Outbox struct {
	dir string
}

// Entry is one message in the outbox.
type Entry struct {
	// ID names the entry in its outbox.
	ID          string `json:"id"`
	MessageID   string `json:"message_id"`
	MessageType string `json:"message_type"`
	// Key is the story (or asset) that orders the entry.
	Key string `json:"key"`
	// KeptAt is when the message was first kept.
	KeptAt time.Time `json:"kept_at"`
	// Attempts counts every send of the message, over every resend.
	Attempts int `json:"attempts"`
	// Status and Rule are the last answer's, 0 and "" when there was none.
	Status int    `json:"status,omitempty"`
	Rule   string `json:"rule,omitempty"`
	// Reason is the last failure, for people.
	Reason string `json:"reason,omitempty"`
	// Refused is set for an entry the bus refused on a resend.
	Refused bool `json:"refused,omitempty"`
	// Message is the message, byte for byte.
	Message []byte `json:"-"`
}

const (
	pendingDir = "pending"
	refusedDir = "refused"
	entryExt   = ".msg"
)

// OpenOutbox opens, or creates, the outbox in dir.
func OpenOutbox(dir string) (*Outbox, error) {
	if dir == "" {
		return nil, errors.New("client: the outbox needs a directory")
	}
	for _, d := range []string{pendingDir, refusedDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("client: outbox: %w", err)
		}
	}
	return &Outbox{dir: dir}, nil
}

// Dir returns the outbox's directory.
func (o *Outbox) Dir() string { return o.dir }

// Put keeps m, after its last failure cause (which may be nil), behind
// every message of its story already kept.
func (o *Outbox) Put(m *Message, cause *Error, at time.Time) (Entry, error) {
	e := Entry{MessageID: m.ID(), MessageType: m.Type(), Key: m.Key(), KeptAt: at.UTC(), Message: m.raw}
	e.record(cause)
	keyDir := filepath.Join(o.dir, pendingDir, encodeKey(e.Key))
	for try := 0; ; try++ {
		if err := os.MkdirAll(keyDir, 0o700); err != nil {
			return Entry{}, fmt.Errorf("client: outbox: %w", err)
		}
		stamp := at.UnixNano()
		if last := lastStamp(keyDir); stamp <= last {
			stamp = last + 1
		}
		name := fmt.Sprintf("%020d-%s%s", stamp, safeName(e.MessageID), entryExt)
		e.ID = pendingDir + "/" + encodeKey(e.Key) + "/" + name
		err := writeEntry(filepath.Join(keyDir, name), e, false)
		if err == nil {
			return e, nil
		}
		// Another process took the name, or removed the story's emptied
		// directory meanwhile: try again.
		if try >= 10 || !(errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrNotExist)) {
			return Entry{}, fmt.Errorf("client: outbox: %w", err)
		}
	}
}

// List returns the pending entries, oldest first.
func (o *Outbox) List() ([]Entry, error) {
	keys, err := os.ReadDir(filepath.Join(o.dir, pendingDir))
	if err != nil {
		return nil, fmt.Errorf("client: outbox: %w", err)
	}
	var all []Entry
	for _, k := range keys {
		if !k.IsDir() {
			continue
		}
		es, err := o.entries(pendingDir + "/" + k.Name())
		if err != nil {
			return nil, err
		}
		all = append(all, es...)
	}
	sortEntries(all)
	return all, nil
}

// Refused returns the entries the bus refused on a resend, oldest first.
// They are never resent; an operator reads and removes them.
func (o *Outbox) Refused() ([]Entry, error) {
	es, err := o.entries(refusedDir)
	if err != nil {
		return nil, err
	}
	sortEntries(es)
	return es, nil
}

// Get returns the entry with the id.
func (o *Outbox) Get(id string) (Entry, error) {
	path, err := o.path(id)
	if err != nil {
		return Entry{}, err
	}
	return readEntry(path, id)
}

// Remove deletes an entry.
func (o *Outbox) Remove(id string) error {
	path, err := o.path(id)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("client: outbox: %w", err)
	}
	if dir := filepath.Dir(path); filepath.Base(filepath.Dir(dir)) == pendingDir {
		_ = os.Remove(dir) // only when the story has no entry left
	}
	return nil
}

// held reports whether the story has pending entries.
func (o *Outbox) held(key string) bool {
	names, _ := entryNames(filepath.Join(o.dir, pendingDir, encodeKey(key)))
	return len(names) > 0
}

// pending returns the story's pending entries, in order.
func (o *Outbox) pending(key string) ([]Entry, error) {
	return o.entries(pendingDir + "/" + encodeKey(key))
}

// keys returns the stories with pending entries, the story of the oldest
// entry first.
func (o *Outbox) keys() ([]string, error) {
	all, err := o.List()
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, e := range all {
		if !slices.Contains(keys, e.Key) {
			keys = append(keys, e.Key)
		}
	}
	return keys, nil
}

// update records another failed resend of a pending entry.
func (o *Outbox) update(e Entry, cause *Error) error {
	path, err := o.path(e.ID)
	if err != nil {
		return err
	}
	e.record(cause)
	return writeEntry(path, e, true)
}

// refuse moves an entry the bus refused to refused/.
func (o *Outbox) refuse(e Entry, cause *Error) (Entry, error) {
	old := e.ID
	e.record(cause)
	e.Refused = true
	e.ID = refusedDir + "/" + filepath.Base(old)
	path, err := o.path(e.ID)
	if err != nil {
		return e, err
	}
	if err := writeEntry(path, e, true); err != nil {
		return e, fmt.Errorf("client: outbox: %w", err)
	}
	return e, o.Remove(old)
}

func (e *Entry) record(cause *Error) {
	if cause == nil {
		return
	}
	e.Attempts += cause.Attempts
	e.Status, e.Rule, e.Reason = cause.Status, cause.Rule, cause.Error()
}

// path resolves an entry id, refusing any that leaves the outbox.
func (o *Outbox) path(id string) (string, error) {
	clean := filepath.ToSlash(filepath.Clean(filepath.FromSlash(id)))
	parts := strings.Split(clean, "/")
	ok := strings.HasSuffix(clean, entryExt) && !slices.Contains(parts, "..") &&
		((len(parts) == 3 && parts[0] == pendingDir) || (len(parts) == 2 && parts[0] == refusedDir))
	if !ok {
		return "", fmt.Errorf("client: outbox: no entry %q", id)
	}
	return filepath.Join(o.dir, filepath.FromSlash(clean)), nil
}

func (o *Outbox) entries(rel string) ([]Entry, error) {
	names, err := entryNames(filepath.Join(o.dir, filepath.FromSlash(rel)))
	if err != nil {
		return nil, fmt.Errorf("client: outbox: %w", err)
	}
	out := make([]Entry, 0, len(names))
	for _, n := range names {
		id := rel + "/" + n
		e, err := readEntry(filepath.Join(o.dir, filepath.FromSlash(id)), id)
		if errors.Is(err, fs.ErrNotExist) {
			continue // resent meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// entryNames lists a directory's entry files in order; a missing directory
// has none.
func entryNames(dir string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range des {
		if !d.IsDir() && strings.HasSuffix(d.Name(), entryExt) && !strings.HasPrefix(d.Name(), ".") {
			names = append(names, d.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

func lastStamp(dir string) int64 {
	names, _ := entryNames(dir)
	if len(names) == 0 {
		return 0
	}
	stamp, _, _ := strings.Cut(names[len(names)-1], "-")
	n, _ := strconv.ParseInt(stamp, 10, 64)
	return n
}

func sortEntries(es []Entry) {
	slices.SortStableFunc(es, func(a, b Entry) int {
		return strings.Compare(filepath.Base(a.ID), filepath.Base(b.ID))
	})
}

// writeEntry writes an entry durably: a temporary file, synced, then
// linked to its name (which must not exist) or, with replace, renamed over
// it; then the directory is synced.
func writeEntry(path string, e Entry, replace bool) error {
	meta, err := json.Marshal(e)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(append(meta, '\n'), e.Message...))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if replace {
		err = os.Rename(tmp.Name(), path)
	} else {
		err = os.Link(tmp.Name(), path)
	}
	if err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

func readEntry(path, id string) (Entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Entry{}, err
	}
	meta, msg, ok := bytes.Cut(b, []byte("\n"))
	var e Entry
	if !ok || json.Unmarshal(meta, &e) != nil {
		return Entry{}, fmt.Errorf("client: outbox entry %s is damaged", id)
	}
	e.ID, e.Message = id, msg
	return e, nil
}

// encodeKey makes a story key a directory name.
func encodeKey(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// safeName keeps a message_id usable in a file name.
func safeName(id string) string {
	if id == "" {
		return "no-message-id"
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, id)
}
