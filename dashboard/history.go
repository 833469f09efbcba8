package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/pgqueue"
)

// History is GET api/history?key=K&max=N: the last N recorded changes of K's limit, oldest first
// (pgqueue.Queue.LimitHistory: when, kind, who, before and after, and the fields changed). N defaults
// to DefaultHistoryMax and may be up to MaxHistoryMax. An unknown key with no history is 404. A key's
// card lists its recent changes from it.
type History struct {
	Key     string                `json:"key"`
	Changes []pgqueue.LimitRecord `json:"changes"`
}

// DefaultHistoryMax and MaxHistoryMax bound api/history's max.
const (
	DefaultHistoryMax = 20
	MaxHistoryMax     = 1000
)

func (h *handler) serveHistory(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" {
		h.fail(w, http.StatusBadRequest, errors.New("key is required: api/history?key=K"))
		return
	}
	max := DefaultHistoryMax
	if s := r.URL.Query().Get("max"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxHistoryMax {
			h.fail(w, http.StatusBadRequest, fmt.Errorf("max must be a whole number from 1 to %d, got %q", MaxHistoryMax, s))
			return
		}
		max = n
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	changes, err := h.q.LimitHistory(ctx, key, time.Time{}, max)
	if err != nil {
		h.failKey(w, err)
		return
	}
	writeJSON(w, http.StatusOK, History{Key: key, Changes: changes})
}
