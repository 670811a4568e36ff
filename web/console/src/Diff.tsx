// A unified diff, line by line, coloured by its first character.
import { clip } from './model';

const MAX_LINES = 5000;

export function Diff({ text }: { text: string }) {
  const lines = text.split('\n');
  const shown = lines.slice(0, MAX_LINES);
  return (
    <pre className="diff" data-testid="diff">
      {shown.map((line, i) => (
        <span key={i} className={lineClass(line)}>
          {clip(line, 2000)}
          {'\n'}
        </span>
      ))}
      {lines.length > MAX_LINES && <span className="muted">… {lines.length - MAX_LINES} more lines</span>}
    </pre>
  );
}

function lineClass(line: string): string {
  if (line.startsWith('+++') || line.startsWith('---') || line.startsWith('diff ') || line.startsWith('index ')) return 'd-file';
  if (line.startsWith('@@')) return 'd-hunk';
  if (line.startsWith('+')) return 'd-add';
  if (line.startsWith('-')) return 'd-del';
  return 'd-ctx';
}
