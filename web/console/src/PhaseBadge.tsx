// A session phase as a coloured badge.
export function PhaseBadge({ phase, testid }: { phase?: string; testid?: string }) {
  const p = phase || 'Unknown';
  return (
    <span className={`phase phase-${p.toLowerCase()}`} data-testid={testid}>
      {p}
    </span>
  );
}
