// The `rill` subcommands: each lives in cli/<cmd>.cc as `int run_<cmd>(int argc, char** argv)`, where
// argv[0] is the subcommand name. main.cc only dispatches.
#pragma once

namespace rill::cli {

int run_generate(int argc, char** argv);
int run_logits(int argc, char** argv);
int run_inspect(int argc, char** argv);
int run_tiny_model(int argc, char** argv);
int run_perplexity(int argc, char** argv);
int run_train_tokenizer(int argc, char** argv);
int run_tokenize(int argc, char** argv);
int run_detokenize(int argc, char** argv);
int run_render(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_bench_serve(int argc, char** argv);  // `rill bench serve`, dispatched by run_bench
int run_serve(int argc, char** argv);
int run_chat(int argc, char** argv);

}  // namespace rill::cli
