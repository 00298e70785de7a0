import { useState, type FormEvent } from "react";
import { ApiError, createClient } from "use-agentenkit";

/** Checks the key against the API before keeping it: a refused key leaves
 * the form where it is with an alert. */
export function SignIn(props: { baseUrl: string; onSignedIn: (apiKey: string) => void }) {
  const [problem, setProblem] = useState<string | null>(null);
  const [checking, setChecking] = useState(false);

  const submit = async (event: FormEvent<HTMLFormElement>) => {
    event.preventDefault();
    const apiKey = String(new FormData(event.currentTarget).get("apiKey") ?? "").trim();
    if (!apiKey) {
      setProblem("Enter your API key.");
      return;
    }
    setChecking(true);
    try {
      await createClient({ baseUrl: props.baseUrl, apiKey }).inbox();
      props.onSignedIn(apiKey);
    } catch (e) {
      setProblem(
        e instanceof ApiError && e.status === 401
          ? "That key was refused. Check it and try again."
          : `The API could not be reached: ${e instanceof Error ? e.message : String(e)}`,
      );
    } finally {
      setChecking(false);
    }
  };

  return (
    <main className="sign-in">
      <form onSubmit={submit} aria-labelledby="sign-in-title">
        <h1 id="sign-in-title">agentenkit</h1>
        <p className="hint">Sign in with your API key to answer what your agents are waiting for.</p>
        <label htmlFor="api-key">API key</label>
        <input id="api-key" name="apiKey" type="password" autoComplete="current-password" autoFocus required />
        <button type="submit" disabled={checking}>
          Sign in
        </button>
        {problem && <p role="alert">{problem}</p>}
      </form>
    </main>
  );
}
