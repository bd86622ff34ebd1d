#!/usr/bin/env python3
"""The markdown table of run.sh from `rill bench serve` result JSON files (standard library only, so it runs
on the GPU machine too).

usage: table.py --where TEXT --commit SHA --prompts FILE NAME|CONCURRENCY|RESULT.json ...

Per run: acceptance rate and mean acceptance length (the spec_decode_* keys bench serve took from the server's
/metrics), the share of output tokens that were accepted drafts, output tokens/s, mean TPOT, and the speed-up over the "off" run at the same concurrency (output
tokens/s ratio). Also checked here, from the outputs themselves: whether each run's texts equal the "off" run's
(greedy speculation must not change them), and how often the model's answer starts by quoting the sentence it
was given the first words of (the prompts' "quote" field): how far this model's outputs are the prompt's text.
"""
import argparse
import json


def first_words(text, n):
    return text.split()[:n]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--where", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    with open(a.prompts) as f:
        quotes = [json.loads(line)["quote"] for line in f if line.strip()]
    runs = []
    for r in a.runs:
        name, conc, path = r.split("|", 2)
        with open(path) as f:
            runs.append((name, int(conc), json.load(f)))
    off = {c: j for name, c, j in runs if name == "off"}

    print(f"{a.where}; commit {a.commit}; {runs[0][2]['num_prompts']} prompts of {a.prompts}, greedy, "
          f"{max(runs[0][2]['output_lens'])} output tokens each")
    print()
    print("| speculation | concurrency | acceptance rate | mean acceptance length | output tokens from drafts "
          "| output tok/s | mean TPOT (ms) | speed-up vs off | outputs = off |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, c, j in runs:
        rate = j.get("spec_decode_acceptance_rate")
        length = j.get("spec_decode_acceptance_length")
        base = off.get(c)
        speedup = f"{j['output_throughput'] / base['output_throughput']:.2f}x" if base else "-"
        same = "-" if not base or name == "off" else (
            "yes" if j["generated_texts"] == base["generated_texts"] else
            f"NO ({sum(x != y for x, y in zip(j['generated_texts'], base['generated_texts']))} differ)")
        # How much of the output the drafts supplied: what bounds the step savings, whatever the acceptance rate.
        covered = "-" if "spec_decode_accepted_tokens" not in j else \
            f"{100 * j['spec_decode_accepted_tokens'] / j['total_output_tokens']:.1f}%"
        print(f"| {name} | {c} | {'-' if rate is None else f'{rate:.1f}%'} | "
              f"{'-' if length is None else f'{length:.2f}'} | {covered} | {j['output_throughput']:.1f} | "
              f"{j['mean_tpot_ms']:.2f} | {speedup} | {same} |")
    if off:
        j = next(iter(off.values()))
        texts = j["generated_texts"]
        n = len(texts)
        starts = sum(first_words(t, 3) == first_words(quotes[i % len(quotes)], 3) for i, t in enumerate(texts))
        print()
        print(f"Answers that go on quoting (their first 3 words are the quoted sentence's next 3): {starts} of {n}.")


if __name__ == "__main__":
    main()
