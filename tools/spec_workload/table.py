#!/usr/bin/env python3
"""The markdown table of run.sh from `rill bench serve` result JSON files (standard library only, so it runs
on the GPU machine too).

usage: table.py --where TEXT --commit SHA --prompts FILE NAME|CONCURRENCY|PASS|RESULT.json ...

Per configuration and concurrency: acceptance rate and mean acceptance length (the spec_decode_* keys bench
serve took from the server's /metrics), the share of output tokens that were accepted drafts, the step-count
bound (decode tokens / decode steps: the speed-up were a verify step as cheap as a one-token step), output tokens/s
and mean TPOT (medians over the passes), and the speed-up over "off" in output tokens/s (prefill included) and
in mean TPOT (decode only): each pass against the "off" run of the same pass and concurrency (runs of one pass
are minutes apart, so the pairing cancels slow changes in the machine's other load), median and range over the
passes. Also checked here, from the
outputs themselves: whether each run's texts equal the "off" run's (greedy speculation must not change them),
and how many of the model's answers go on quoting the sentence they were given the first words of (the
prompts' "quote" field).
"""
import argparse
import json
import statistics


def first_words(text, n):
    return text.split()[:n]


def spread(values, fmt):
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--where", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    with open(a.prompts) as f:
        quotes = [json.loads(line)["quote"] for line in f if line.strip()]
    runs = {}  # (name, concurrency) -> {pass: result}
    for r in a.runs:
        name, conc, pass_, path = r.split("|", 3)
        with open(path) as f:
            runs.setdefault((name, int(conc)), {})[int(pass_)] = json.load(f)
    first = next(iter(next(iter(runs.values())).values()))
    n_passes = max(len(p) for p in runs.values())

    print(f"{a.where}; commit {a.commit}; {first['num_prompts']} prompts of {a.prompts} (mean "
          f"{statistics.mean(first['input_lens']):.0f} prompt tokens), greedy, {max(first['output_lens'])} output "
          f"tokens each; " + (f"medians of {n_passes} interleaved passes (range in brackets)" if n_passes > 1
                              else "one pass"))
    print()
    print("| speculation | concurrency | acceptance rate | mean acceptance length | output tokens from drafts "
          "| step-count bound | output tok/s | mean TPOT (ms) | speed-up vs off: tok/s | speed-up vs off: TPOT "
          "| outputs = off |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    notes = []
    for (name, c), passes in runs.items():
        off = runs.get(("off", c), {})
        j = passes[min(passes)]
        # Greedy: every pass gives the same texts, so the same drafts; the acceptance of the first pass stands
        # for all (checked: the draft counts of the passes must agree).
        drafts = {p.get("spec_decode_num_drafts") for p in passes.values()}
        rate, length = j.get("spec_decode_acceptance_rate"), j.get("spec_decode_acceptance_length")
        covered = "-" if "spec_decode_accepted_tokens" not in j else \
            f"{100 * j['spec_decode_accepted_tokens'] / j['total_output_tokens']:.1f}%"
        if len(drafts) > 1:  # suffix decoding at concurrency > 1: what is cached depends on finishing order
            covered += "*"
            notes.append(f"*{name}, concurrency {c}: the passes drafted {sorted(drafts)} times (the first pass's "
                         "figures are shown).")
        # Each sequence's decode step emits 1 + its accepted drafts, so the decode tokens (all but each
        # request's first, which its prefill samples) took decode_tokens - accepted steps: the speed-up if a
        # verify step cost what a one-token step costs (the memory-bound limit), not a measurement.
        decode_tokens = j["total_output_tokens"] - j["completed"]
        bound = "-" if "spec_decode_accepted_tokens" not in j else \
            f"{decode_tokens / (decode_tokens - j['spec_decode_accepted_tokens']):.2f}x"
        ratios = [p["output_throughput"] / off[k]["output_throughput"] for k, p in passes.items() if k in off]
        tpot_ratios = [off[k]["mean_tpot_ms"] / p["mean_tpot_ms"] for k, p in passes.items() if k in off]
        same = "-"
        if name != "off" and off:
            differ = sum(p["generated_texts"] != off[k]["generated_texts"] for k, p in passes.items() if k in off)
            same = "yes" if differ == 0 else f"NO ({differ} passes differ)"
        print(f"| {name} | {c} | {'-' if rate is None else f'{rate:.1f}%'} | "
              f"{'-' if length is None else f'{length:.2f}'} | {covered} | {bound} | "
              f"{spread([p['output_throughput'] for p in passes.values()], '{:.1f}')} | "
              f"{spread([p['mean_tpot_ms'] for p in passes.values()], '{:.2f}')} | "
              f"{spread(ratios, '{:.2f}x') if ratios else '-'} | "
              f"{spread(tpot_ratios, '{:.2f}x') if tpot_ratios else '-'} | {same} |")
    for note in notes:
        print()
        print(note)
    off_runs = [p for (name, _), passes in runs.items() if name == "off" for p in passes.values()]
    if off_runs:
        texts = off_runs[0]["generated_texts"]
        starts = sum(first_words(t, 3) == first_words(quotes[i % len(quotes)], 3) for i, t in enumerate(texts))
        print()
        print(f"Answers that go on quoting (their first 3 words are the quoted sentence's next 3): {starts} of "
              f"{len(texts)}.")


if __name__ == "__main__":
    main()
