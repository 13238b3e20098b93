package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine/lmstfy"
	"github.com/kairos-dev/kairos/engine/rdb"
)

// ErrLmstfyData is returned (wrapped, naming the pool and what was found)
// when a pool's Redis holds lmstfy's jobs and the pool's LmstfyData does
// not ask for their import: Kairos would serve its own layout beside them
// and no client would see them again (issue #30).
var ErrLmstfyData = errors.New("the pool holds lmstfy's jobs")

// lmstfyError is ErrLmstfyData with the words an operator reads.
type lmstfyError struct{ msg string }

func (e *lmstfyError) Error() string { return e.msg }
func (e *lmstfyError) Unwrap() error { return ErrLmstfyData }

// checkLmstfy looks for lmstfy's jobs in pool name's Redis before its
// engine starts (so before anything is written there). It returns whether
// the pool holds some, and an error naming [Pool.name] LmstfyData when it
// does and the config does not ask for the import. The keyspace is
// scanned only on a pool without Kairos's layout marker: the first start
// of this version there; later starts look at timer_set and at the queues
// of lmstfy's registries, which lmstfy writes at its first publish.
func (a *App) checkLmstfy(ctx context.Context, name string, client redis.UniversalClient) (bool, error) {
	layout, err := rdb.ReadLayout(ctx, client)
	if err != nil {
		return false, fmt.Errorf("Pool.%s: %w", name, err)
	}
	found, err := lmstfy.Detect(ctx, client, layout == 0)
	if err != nil {
		return false, fmt.Errorf("Pool.%s: %w", name, err)
	}
	if !found.Jobs() {
		return false, nil
	}
	rc := a.cfg.Pool[name]
	if rc.LmstfyData == config.LmstfyImport {
		return true, nil
	}
	return true, &lmstfyError{fmt.Sprintf("Pool.%[1]s: the Redis %[2]s holds lmstfy's jobs (%[3]s). Kairos keeps jobs in its own key layout and would not see these. "+
		"Stop every lmstfy server of this Redis, then either set LmstfyData = %[4]q in [Pool.%[1]s] to move them into Kairos's layout at start, "+
		"or run `kairos-server -c <config> -migrate-from-lmstfy` once (doc/upgrade.md). "+
		"The server stopped without changing anything in this Redis",
		name, rc.Describe(), found, config.LmstfyImport)}
}

// LmstfyImport is one pool's import of lmstfy's jobs.
type LmstfyImport struct {
	// Into is the pool written: the pool itself, or its MigrateTo pool.
	Into   string
	Result lmstfy.Result
	Took   time.Duration
}

// importLmstfy imports the lmstfy jobs of each pool of clients into the
// pool (or its MigrateTo pool) before anything is served, and logs what
// each import did.
func (a *App) importLmstfy(ctx context.Context, clients map[string]redis.UniversalClient) error {
	for _, name := range a.cfg.PoolNames() {
		client, ok := clients[name]
		if !ok {
			continue
		}
		into := name
		if to := a.cfg.Pool[name].MigrateTo; to != "" {
			into = to
		}
		log := a.log.WithFields(logrus.Fields{"pool": name, "into": into})
		log.Warn("importing lmstfy's jobs into Kairos's layout (LmstfyData = \"import\"); nothing is served until it ends")
		start := time.Now()
		im := &lmstfy.Importer{Source: client, Dest: a.Engines[into], Log: log}
		res, err := im.Run(ctx)
		took := time.Since(start)
		fields := logrus.Fields{
			"ready": res.Ready, "delayed": res.Delayed, "in_flight": res.InFlight, "dead": res.Dead,
			"already_imported": res.Already, "expired": res.Expired, "malformed": res.Malformed,
			"queues": res.Queues, "registries_deleted": res.Registries, "seconds": took.Seconds(),
		}
		if err != nil {
			log.WithFields(fields).WithError(err).Error("lmstfy import stopped; the counts are the jobs written into Kairos until then. Run it again: it resumes, and writes no job twice")
			return fmt.Errorf("Pool.%s: import lmstfy's jobs: %w", name, err)
		}
		log.WithFields(fields).Warn(fmt.Sprintf("imported %d lmstfy jobs into Kairos's layout", res.Imported()))
		if a.LmstfyImports == nil {
			a.LmstfyImports = make(map[string]LmstfyImport)
		}
		a.LmstfyImports[name] = LmstfyImport{Into: into, Result: res, Took: took}
	}
	return nil
}
