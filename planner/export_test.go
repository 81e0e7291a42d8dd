package planner

// PlantBareHostFailing breaks Run on purpose: a run stopped by a failing
// host ends with the bare ErrHostFailing ("database unavailable"), not a
// *HostFailingError naming the host's last failure, as before issue 47.
func PlantBareHostFailing(p *Planner) { p.bareHostFailing = true }
