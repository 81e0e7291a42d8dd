package fence

import "github.com/mendq/mend"

// WithBeforeRenew returns cfg with a hook that runs on the keepalive
// goroutine before each renew; blocking in it stands for a paused process.
func WithBeforeRenew(cfg Config, f func(mend.Term)) Config {
	cfg.beforeRenew = f
	return cfg
}
