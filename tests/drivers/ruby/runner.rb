# The driver scenario (tests/drivers/scenario.json) through the sqlite3 gem:
#   ruby runner.rb TINYQ_SO SCENARIO DB
require 'json'
require 'sqlite3'

# The first step that does not answer as written, as a reason; nil when all do.
def play(db, steps)
  steps.each do |step|
    begin
      rows = db.execute(step['sql'], step['args'])
    rescue SQLite3::Exception => e
      next if step['error'] && e.message.include?(step['error'])
      return "#{step['name']}: unexpected error #{e.message}"
    end
    return "#{step['name']}: no error, got #{rows.inspect}" if step['error']
    # == on arrays compares each cell with its type: 1 is not "1"
    return "#{step['name']}: expected #{step['rows'].inspect}, got #{rows.inspect}" unless rows == step['rows']
  end
  nil
end

so, scenario, path = ARGV
begin
  db = SQLite3::Database.new(path)
  db.enable_load_extension(true)
  db.load_extension(so)
  db.enable_load_extension(false)
  reason = play(db, JSON.parse(File.read(scenario))['steps'])
rescue StandardError => e
  reason = "#{e.class}: #{e.message}"
end
if reason
  puts "ruby: failed: #{reason}"
  exit 1
end
puts "ruby: passed (SQLite #{db.get_first_value('SELECT sqlite_version()')}; sqlite3 gem #{SQLite3::VERSION}, Ruby #{RUBY_VERSION})"
