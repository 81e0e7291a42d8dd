package reconcile

import "time"

// SetRecountEvery sets how often r's passes count the working replicas
// again (0: before every queue they take).
func SetRecountEvery(r *Reconciler, d time.Duration) { r.recountEvery = d }
