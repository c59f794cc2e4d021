package coordinator

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/lockstep"
)

// maxListed bounds how many stale sessions a problem names, so that a
// record stuffed by hand cannot flood status.
const maxListed = 5

// staleHolders reports the sessions the slot's holders record lists that
// lock no holder key: a holder that died, or an entry written by someone
// else. lockstep does not count them against K and drops them at its next
// grant, but until then an operator should see them. It returns "" when
// there are none or the record is absent or unreadable (Holders.Problem
// reports that).
func staleHolders(k Keys, pairs api.KVPairs, live *lockstep.Holders) string {
	key := k.Slot() + ".holders"
	var rec struct {
		Holders map[string]json.RawMessage `json:"holders"`
	}
	for _, p := range pairs {
		if p.Key == key && json.Unmarshal(p.Value, &rec) != nil {
			return ""
		}
	}
	var stale []string
	for id := range rec.Holders {
		if _, ok := live.Holding[id]; !ok {
			stale = append(stale, id)
		}
	}
	if len(stale) == 0 {
		return ""
	}
	sort.Strings(stale)
	n := len(stale)
	for i := range stale {
		stale[i] = fmt.Sprintf("%.40q", stale[i])
	}
	if n > maxListed {
		stale = append(stale[:maxListed], fmt.Sprintf("and %d more", n-maxListed))
	}
	return fmt.Sprintf("%s lists %d session(s) that hold no slot (a dead holder, or written by hand); they do not count: %s",
		key, n, strings.Join(stale, ", "))
}
