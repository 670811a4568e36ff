// Routing: a hash router (#/ with ?namespace=NS, #/sessions/NS/NAME) needs
// nothing from the server and works under any path prefix.
import { useEffect, useState } from 'react';

export type Route =
  | { page: 'list'; namespace?: string }
  | { page: 'session'; namespace: string; name: string }
  | { page: 'missing'; hash: string };

export function parseRoute(hash: string): Route {
  const h = hash.replace(/^#/, '') || '/';
  const [path, query = ''] = h.split('?', 2);
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  if (parts.length === 0) {
    const ns = new URLSearchParams(query).get('namespace') ?? undefined;
    return { page: 'list', namespace: ns || undefined };
  }
  if (parts[0] === 'sessions' && parts.length === 3) {
    return { page: 'session', namespace: parts[1], name: parts[2] };
  }
  return { page: 'missing', hash };
}

export function listHref(namespace?: string): string {
  return namespace ? `#/?namespace=${encodeURIComponent(namespace)}` : '#/';
}

export function sessionHref(namespace: string, name: string): string {
  return `#/sessions/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`;
}

export function navigate(href: string): void {
  window.location.hash = href.replace(/^#/, '');
}

export function useHash(): string {
  const [hash, setHash] = useState(() => window.location.hash);
  useEffect(() => {
    const on = () => setHash(window.location.hash);
    window.addEventListener('hashchange', on);
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return hash;
}

