"""The ground floor: what every layer of DESIGN.md (features, forecaster, training, artifacts,
serving, scheduler_hook, simulator) and the CLI above them may import. It imports no project
package (tests/test_layers.py)."""
