# Convenience targets; README.md gives the plain go commands they run.
.PHONY: build test lint bench bench-short

build:
	go build -o bin/ ./cmd/...

# The README's test command.
test:
	go test -race ./...

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	go vet ./...

# Full benchmark: floor, naive baselines and the product, side by side.
bench:
	go run ./test/bench

bench-short:
	go run ./test/bench -short
