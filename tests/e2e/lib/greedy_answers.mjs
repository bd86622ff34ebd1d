// What the multi-rank servers must answer exactly as one rank does (tensor_parallel_test, mpi_serve_test):
// greedy completions and chat of a served model "m" through the official openai client, streamed and not.
export async function answers(client) {
  const out = [];
  for (const prompt of ["The quick brown fox", "Once upon a time, in a land far away,"]) {
    const r = await client.completions.create({ model: "m", prompt, max_tokens: 24, temperature: 0 });
    out.push(["completion", r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens]);
    let streamed = "";
    for await (const chunk of await client.completions.create({ model: "m", prompt, max_tokens: 24, temperature: 0, stream: true }))
      streamed += chunk.choices[0]?.text ?? "";
    out.push(["completion stream", streamed]);
  }
  const messages = [{ role: "user", content: "Tell me about rivers." }];
  const chat = await client.chat.completions.create({ model: "m", messages, max_tokens: 24, temperature: 0 });
  out.push(["chat", chat.choices[0].message.content, chat.choices[0].finish_reason]);
  let streamed = "";
  for await (const chunk of await client.chat.completions.create({ model: "m", messages, max_tokens: 24, temperature: 0, stream: true }))
    streamed += chunk.choices[0]?.delta?.content ?? "";
  out.push(["chat stream", streamed]);
  return out;
}
