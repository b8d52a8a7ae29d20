package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/jobs"
)

// jobsKeyName is the key under which the job broker's key is stored.
const jobsKeyName = "broker"

// JobsKey returns the key every job broker of the cluster signs with
// (jobs/sign.go), making it on first use: KeySize random bytes in a bucket
// of the managers' account (NamesFor(prefix).JobsKey), which no executor,
// reader or worker can read. created says this call made it, so records
// stored before it (by a version without brokers) have no signature yet
// (jobs.Broker.Adopt).
func JobsKey(ctx context.Context, nc *nats.Conn, prefix string, replicas int) (key []byte, created bool, err error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, false, fmt.Errorf("jetstream: %w", err)
	}
	bucket := NamesFor(prefix).JobsKey
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: bucketDescription(bucket),
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		MaxBytes:    64 << 10,
	})
	if err != nil {
		return nil, false, fmt.Errorf("jetstream: job broker key bucket %q: %w", bucket, err)
	}
	fresh := make([]byte, jobs.KeySize)
	if _, err := rand.Read(fresh); err != nil {
		return nil, false, err
	}
	_, err = kv.Create(ctx, jobsKeyName, []byte(base64.StdEncoding.EncodeToString(fresh)))
	if err == nil {
		return fresh, true, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, false, fmt.Errorf("jetstream: job broker key: %w", err)
	}
	e, err := kv.Get(ctx, jobsKeyName)
	if err != nil {
		return nil, false, fmt.Errorf("jetstream: job broker key: %w", err)
	}
	key, err = base64.StdEncoding.DecodeString(string(e.Value()))
	if err != nil || len(key) != jobs.KeySize {
		return nil, false, fmt.Errorf("jetstream: job broker key in %s is not %d bytes of base64: replace it (nats kv del %s %s) and restart the lease managers", bucket, jobs.KeySize, bucket, jobsKeyName)
	}
	return key, false, nil
}
