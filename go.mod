module github.com/neureality-sdk/nr1-agent

go 1.26.0
