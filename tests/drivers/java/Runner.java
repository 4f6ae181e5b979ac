// The driver scenario (tests/drivers/scenario.json) through sqlite-jdbc:
//   java -cp sqlite-jdbc.jar Runner.java TINYQ_SO SCENARIO DB
// The scenario is read with SQLite's own JSON functions, on a connection without tinyq.
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import org.sqlite.SQLiteConfig;

public class Runner {
    /** One connection with tinyq: the load is per connection, so a pool does it in each one it opens. */
    static Connection open(String so, String path) throws SQLException {
        SQLiteConfig config = new SQLiteConfig();
        config.enableLoadExtension(true);
        Connection conn = DriverManager.getConnection("jdbc:sqlite:" + path, config.toProperties());
        try (PreparedStatement load = conn.prepareStatement("SELECT load_extension(?)")) {
            load.setString(1, so);
            load.execute();
        }
        return conn;
    }

    /** A cell as the scenario writes it: integers as Long (getObject gives Integer or Long), texts, nulls. */
    static Object cell(Object value) {
        return value instanceof Integer i ? Long.valueOf(i) : value;
    }

    static List<List<Object>> rows(ResultSet rs) throws SQLException {
        List<List<Object>> rows = new ArrayList<>();
        int width = rs.getMetaData().getColumnCount();
        while (rs.next()) {
            List<Object> row = new ArrayList<>();
            for (int i = 1; i <= width; i++) row.add(cell(rs.getObject(i)));
            rows.add(row);
        }
        return rows;
    }

    record Step(String name, String sql, List<Object> args, List<List<Object>> rows, String error) {}

    /** Rows of a JSON text (a list of lists of cells), read by SQLite: json_each gives each cell's type. */
    static List<List<Object>> jsonRows(Connection json, String text) throws SQLException {
        List<List<Object>> rows = new ArrayList<>();
        if (text == null) return rows;
        try (PreparedStatement q = json.prepareStatement(
                "SELECT c.key, c.value FROM json_each(?1) AS r LEFT JOIN json_each(r.value) AS c ORDER BY r.key, c.key")) {
            q.setString(1, text);
            ResultSet rs = q.executeQuery();
            while (rs.next()) {
                if (rs.getObject(1) == null || rs.getLong(1) == 0) rows.add(new ArrayList<>());
                if (rs.getObject(1) != null) rows.get(rows.size() - 1).add(cell(rs.getObject(2)));
            }
        }
        return rows;
    }

    /** The scenario's steps; each one's texts are read first, then its JSON parts (one open query at a time). */
    static List<Step> steps(Connection json, String scenario) throws SQLException {
        List<String[]> texts = new ArrayList<>();
        try (PreparedStatement q = json.prepareStatement(
                "SELECT value ->> 'name', value ->> 'sql', json_array(value -> 'args'), value -> 'rows', value ->> 'error'"
                + " FROM json_each(?1, '$.steps') ORDER BY key")) {
            q.setString(1, scenario);
            ResultSet rs = q.executeQuery();
            while (rs.next()) texts.add(new String[] {rs.getString(1), rs.getString(2), rs.getString(3), rs.getString(4), rs.getString(5)});
        }
        List<Step> steps = new ArrayList<>();
        for (String[] t : texts) steps.add(new Step(t[0], t[1], jsonRows(json, t[2]).get(0), jsonRows(json, t[3]), t[4]));
        return steps;
    }

    /** The first step that does not answer as written, as a reason; null when all do. */
    static String play(Connection db, List<Step> steps) {
        for (Step step : steps) {
            List<List<Object>> got;
            try (PreparedStatement stmt = db.prepareStatement(step.sql())) {
                for (int i = 0; i < step.args().size(); i++) stmt.setObject(i + 1, step.args().get(i));
                got = rows(stmt.executeQuery());
            } catch (SQLException e) {
                if (step.error() != null && e.getMessage().contains(step.error())) continue;
                return step.name() + ": unexpected error " + e.getMessage();
            }
            if (step.error() != null) return step.name() + ": no error, got " + got;
            if (!step.rows().equals(got)) return step.name() + ": expected " + step.rows() + ", got " + got;
        }
        return null;
    }

    public static void main(String[] argv) throws Exception {
        String reason, version = null, driver = null;
        try (Connection db = open(argv[0], argv[2]); Connection json = DriverManager.getConnection("jdbc:sqlite::memory:")) {
            reason = play(db, steps(json, Files.readString(Path.of(argv[1]))));
            version = db.createStatement().executeQuery("SELECT sqlite_version()").getString(1);
            driver = db.getMetaData().getDriverVersion();
        } catch (Exception e) {
            reason = e.getClass().getSimpleName() + ": " + e.getMessage();
        }
        if (reason != null) {
            System.out.println("java: failed: " + reason);
            System.exit(1);
        }
        System.out.printf("java: passed (SQLite %s; sqlite-jdbc %s, Java %s)%n", version, driver, System.getProperty("java.version"));
    }
}
