// The console's shell: the header and the page the hash route names.
import { SessionList } from './SessionList';
import { SessionPage } from './SessionPage';
import { parseRoute, useHash } from './router';

export function App() {
  const route = parseRoute(useHash());
  return (
    <>
      <header className="top">
        <a href="#/" className="brand">
          agent-operator console
        </a>
      </header>
      <main>
        {route.page === 'list' && <SessionList namespace={route.namespace} />}
        {route.page === 'session' && (
          <SessionPage key={`${route.namespace}/${route.name}`} namespace={route.namespace} name={route.name} />
        )}
        {route.page === 'missing' && (
          <p>
            No such page. <a href="#/">Sessions</a>
          </p>
        )}
      </main>
    </>
  );
}
