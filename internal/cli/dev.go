package cli

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/internal/fakemodel"
)

// devCommand is the hidden "kin dev": tools for trying kin out and for
// tests in other languages, not for running agents.
func (a *app) devCommand() *cobra.Command {
	dev := &cobra.Command{
		Use:    "dev",
		Short:  "Tools for trying kin out (a fake model provider)",
		Hidden: true,
		Args:   cobra.NoArgs,
	}
	dev.AddCommand(a.fakeModelCommand())
	return dev
}

// fakeModelEnvKey is where "kin dev fake-model" reads its key when --key
// is not given (so it need not be on a command line).
const fakeModelEnvKey = "KIN_FAKE_MODEL_KEY"

func (a *app) fakeModelCommand() *cobra.Command {
	var (
		listen  string
		verbose bool
		o       fakemodel.Options
	)
	cmd := &cobra.Command{
		Use:   "fake-model",
		Short: "Serve a fake OpenAI and Anthropic API that answers every call the same way",
		Long: `Serve a fake model provider until interrupted: OpenAI's /v1/chat/completions,
/v1/responses, /v1/embeddings, /v1/models and Anthropic's /v1/messages and
/v1/messages/count_tokens, streaming and not, every call answered with
--reply and reporting --input-tokens, --output-tokens and --cached-tokens in
each API's usage fields (a request's max_tokens-style limit lowers the
output). Calls must carry --key (default $` + fakeModelEnvKey + `) as the
provider's client sends it. It prints the URL it listens on (with --json,
{"url": ...}), then serves. It is what "kin serve --model-upstream" is tried
against without a real provider.`,
		Example: `  kin dev fake-model --listen 127.0.0.1:8089 --key upstream-secret
  KIN_FAKE_MODEL_KEY=upstream-secret kin dev fake-model --input-tokens 10 --output-tokens 5 --json`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			o.Key = cmp.Or(o.Key, os.Getenv(fakeModelEnvKey))
			o.NoRecord = true // nobody reads them
			if verbose {
				o.Log = a.env.Stderr
			}
			s, err := fakemodel.Listen(listen, o)
			if err != nil {
				return err
			}
			if a.jsonOut {
				err = a.printJSON(map[string]string{"url": s.URL})
			} else {
				_, err = fmt.Fprintf(a.env.Stdout, "fake model provider listening on %s\n", s.URL)
			}
			if err != nil {
				_ = s.Close()
				return err
			}
			<-cmd.Context().Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if s.Shutdown(ctx) != nil {
				return s.Close()
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:0", "the `host:port` to listen on (port 0 picks a free one)")
	f.StringVar(&o.Key, "key", "", "the API `key` calls must carry (default $"+fakeModelEnvKey+"; none: any)")
	f.IntVar(&o.InputTokens, "input-tokens", 10, "input tokens each call reports")
	f.IntVar(&o.OutputTokens, "output-tokens", 5, "output tokens each call reports")
	f.IntVar(&o.CachedTokens, "cached-tokens", 0, "cached input tokens each call reports")
	f.StringVar(&o.Reply, "reply", "ok", "the assistant's `text`")
	f.IntVar(&o.Chunks, "chunks", 0, "content deltas a streamed reply is cut into (default one per character)")
	f.DurationVar(&o.ChunkDelay, "chunk-delay", 0, "pace streamed content deltas this far apart, on a schedule from the stream's start (a late one does not push the next back)")
	f.StringSliceVar(&o.Models, "model", nil, "a model calls may name (repeatable; default any)")
	f.BoolVar(&verbose, "verbose", false, "print each call (method, path, status, body) on stderr")
	return cmd
}
