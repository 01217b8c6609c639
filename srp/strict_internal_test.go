package srp

// Every test of the package runs with strict moves: a channel phase or command stage move
// that the tables in channel_state.go do not allow panics, failing the test that made it.
func init() { strictMoves = true }
