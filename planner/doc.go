// Package planner finishes the repair of a queue's reconciliation records.
package planner
