// Package config is srptarget's configuration file: its types, strict YAML decoding, the
// defaults, validation, and the conversions to what the engine (srp), the SCSI emulation
// (scsi) and the backstores take. configs/README.md documents every key.
//
// It is a package of its own, not part of the daemon (cmd/srptarget), so that the file's
// meaning can be read and tested without the daemon: `srptarget validate`, a reload and serve
// go through the same Parse, and the golden tests of validate's output (testdata/validate)
// and the fuzzer of the decoder run here. It imports srp, scsi and backstore for the types it
// converts to and their defaults; nothing here imports cmd.
//
// Loading is three separate steps, each with one job:
//
//   - decoding (Parse, Load): strict YAML, every unknown key, mistyped value and key given
//     twice reported with its line, in file order, before anything else is looked at;
//   - ApplyDefaults: fills what the file leaves out and never rejects anything;
//   - Validate: checks the result and never changes it, so that it may be asked again (a
//     reload dry run, a Config built in Go) with the same answer.
//
// Parse runs the three and returns a configuration only when it is valid; every error message
// names the file, the line and the key path (luns[1].size), as users and the test scripts
// read them (integration/logpins_test.go pins some).
package config
